"""One operation of the gateway's OpenAPI document, as :mod:`cordum.gateway.openapi`
renders it: its path, parameters, answers (the models of ``cordum.gateway.schemas``)
and the errors it documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from cordum.gateway import schemas

JSON = "application/json"

AUTHENTICATED = (401, 403, 429, 500, 503)
"""What any operation behind a credential may answer (auth, tenant, rate limit, outages)."""


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    """OpenAPI path template (``{name}`` parameters)."""
    operation_id: str
    summary: str
    tag: str
    ok: Any
    """Python type of the success body (a model, ``list[Model]``, ``str``, ``dict``), or None."""
    ok_status: int = 200
    ok_media: str = JSON
    errors: tuple[int, ...] = AUTHENTICATED
    notes: dict[int, str] = field(default_factory=dict)
    """Per-status detail (the machine codes) added to the error description."""
    query: tuple[str, ...] = ()
    """Parameter names of ``components.parameters`` (query) or of ``openapi.LIST_JOB_FILTERS``."""
    body: type[BaseModel] | None = None
    idempotency: bool = False
    public: bool = False
    """No credential and no tenant header."""
    unhealthy: bool = False
    """A 503 answers the health body, not ``Error``."""

    def statuses(self) -> set[int]:
        return {self.ok_status, *self.errors}

    def error_type(self, status: int) -> type[BaseModel]:
        if self.unhealthy and status == 503:
            return schemas.HealthResponse
        return schemas.Error


def codes(names: tuple[str, ...]) -> str:
    """An error note listing machine codes."""
    return "codes: " + ", ".join(names)
