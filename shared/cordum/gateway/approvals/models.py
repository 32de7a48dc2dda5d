"""The body of an approval decision (approve, reject): Cordum's fields and limits.

The model validates what arrives and is the one the OpenAPI document describes
(``cordum.gateway.approvals.openapi``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum.gateway.core.models import no_default

FREE_TEXT_MAX_BYTES = 512
"""Cordum bounds an approval's reason and note to 512 bytes."""


def bound_free_text(value: str) -> str:
    """Trimmed, and cut to ``FREE_TEXT_MAX_BYTES`` of UTF-8 on a character boundary."""
    data = value.strip().encode()[:FREE_TEXT_MAX_BYTES]
    return data.decode(errors="ignore").strip()


class ApprovalDecisionRequest(BaseModel):
    """Body of approve and reject: a reason is required, a note is optional."""

    # Unknown fields are accepted and ignored, as the document says. Descriptions are
    # given as Field arguments: attribute docstrings would make pydantic read and parse
    # this module's source at import, ~20 ms of every gateway cold start.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    reason: str = Field(description="Why; trimmed and cut to 512 bytes of UTF-8. It must "
                                    "not be empty.")
    note: str = Field(default="", json_schema_extra=no_default,
                      description="Trimmed and cut to 512 bytes of UTF-8.")

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        value = bound_free_text(value)
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        return bound_free_text(value)
