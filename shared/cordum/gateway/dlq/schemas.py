"""Response bodies of the dead-letter routes, as Cordum's spec has them (the
conventions of ``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, PaginatedResponse, optional


class DLQEntry(Body):
    job_id: str = optional()
    topic: str = optional()
    tenant: str = optional()
    error: str = optional()
    failed_at: AwareDatetime = optional()
    retry_count: int = optional()
    original_state: str = optional()


class DLQPage(PaginatedResponse):
    items: list[DLQEntry] = optional()
