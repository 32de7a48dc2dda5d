"""Response bodies of the schema and topic routes (the conventions of
``cordum.gateway.core.schemas`` hold here too; names are cordum-sdk's)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cordum.gateway.core.schemas import Body, PaginatedResponse, optional


class SchemaRecord(Body):
    """One registered schema."""

    id: str
    schema_: dict[str, Any] = Field(alias="schema", description="The JSON Schema document.")
    sha256: str = optional()
    """SHA-256 hex of the schema's canonical JSON (keys sorted, compact)."""
    updated_at: str = optional()
    """When it was last registered, RFC 3339."""


class SchemaList(PaginatedResponse):
    """The tenant's schemas in id order, each with its document (the SDK reads records,
    not bare ids)."""

    schemas: list[SchemaRecord]


class TopicResponse(Body):
    """A topic registration (Cordum's ``topicResponse``; a write also answers
    ``tenant_id``)."""

    name: str
    status: str
    """active, deprecated or disabled."""
    pool: str = optional()
    input_schema_id: str = optional()
    output_schema_id: str = optional()
    pack_id: str = optional()
    requires: list[str] = optional()
    risk_tags: list[str] = optional()
    tenant_id: str = optional()
    active_worker_count: int = optional()
    """Workers of the topic's pool heard from in the last 30 s (lists only)."""


class TopicList(PaginatedResponse):
    items: list[TopicResponse]
    registry_empty: bool = optional()
    """True when the tenant has registered no topic."""
