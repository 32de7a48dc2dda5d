"""What each feature declares of the gateway's OpenAPI document: its operations (path,
parameters, answers, the errors they document) and its tags, as one :class:`ApiPart`.

``cordum.gateway.docs.openapi`` renders the parts that ``cordum.gateway.app`` hands it;
a feature never sees another's part. Answers are pydantic models (``Error`` of
``cordum.gateway.core.schemas`` for every error, unless the operation names another).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from cordum.gateway.core import schemas

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
    """Parameter names of ``components.parameters`` (query); any other name is a plain
    string query parameter."""
    body: type[BaseModel] | None = None
    idempotency: bool = False
    public: bool = False
    """No credential and no tenant header."""
    unhealthy: type[BaseModel] | None = None
    """The body a 503 answers instead of ``Error`` (the health body), when it does."""
    elsewhere: str = ""
    """Who serves it when the REST API does not (its description says where and how)."""
    also: tuple[tuple[int, Any, str], ...] = ()
    """Other success answers: (status, Python type of the body, description)."""

    def statuses(self) -> set[int]:
        return {self.ok_status, *(a[0] for a in self.also), *self.errors}

    def error_type(self, status: int) -> type[BaseModel]:
        if self.unhealthy is not None and status == 503:
            return self.unhealthy
        return schemas.Error


@dataclass(frozen=True, slots=True)
class ApiPart:
    """One feature's share of the document: its operations, in the order the document
    lists them, and the tags (name, description) they are grouped under."""

    operations: tuple[Operation, ...]
    tags: tuple[tuple[str, str], ...] = ()


def codes(names: tuple[str, ...]) -> str:
    """An error note listing machine codes."""
    return "codes: " + ", ".join(names)
