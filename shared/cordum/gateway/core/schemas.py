"""Response bodies of the HTTP API, as Cordum's OpenAPI spec has them: what every
feature's answers are built of, and the answers more than one feature gives.

Field names, types, enums and nullability follow Cordum's published spec (the
one cordum-sdk parses). Every field is optional unless the spec requires it;
"optional" means it may be absent, and only the fields the spec marks nullable
may be ``null``. Extra fields are allowed: the gateway serves Cordum's own
extras beside the spec's fields. Each feature's own bodies are in its
``schemas`` module, under the same conventions.

Validate an answer with ``Model.model_validate_json(body, strict=True)``: in
strict JSON mode a date-time must be an RFC 3339 string with an offset (no
epoch integers) and an integer field refuses ``1.0``, as the SDK does.
``cordum.gateway.docs.openapi`` builds the OpenAPI document from these models.
"""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from cordum.gateway.core.models import no_default


def optional() -> Any:
    """May be absent. ``null`` is refused unless the annotation says ``X | None``."""
    return Field(default=None, json_schema_extra=no_default)


class Body(BaseModel):
    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


class Error(Body):
    """Every 4xx/5xx answer."""

    error: str
    """Human-readable message."""
    code: str = optional()
    """Machine code, e.g. ``tenant_access_denied``, ``IDEMPOTENCY_CONFLICT``."""
    status: int
    """The HTTP status again."""


class PaginatedResponse(Body):
    next_cursor: str | None = optional()
    """Pass as ``cursor`` for the next page; ``null`` when there is none."""


class JobSummary(Body):
    id: str = optional()
    state: str = optional()
    topic: str = optional()
    tenant: str = optional()
    updated_at: AwareDatetime = optional()


class SubmitJobResponse(Body):
    job_id: str = optional()
    trace_id: str = optional()


class JobIdResponse(Body):
    """Reject answers the job's id; a DLQ retry answers the new job's id."""

    job_id: str = optional()
