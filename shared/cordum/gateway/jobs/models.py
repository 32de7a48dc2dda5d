"""The body of a job submit (Cordum's field names and limits).

This model validates what arrives and is the one the OpenAPI document describes
(``cordum.gateway.jobs.openapi``), so the document says exactly what is accepted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.models import idempotency_key_error
from cordum.labels import has_control_chars, is_reserved_label

TOPIC_PATTERN = r"^job\.[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
MAX_TOPIC_CHARS = 256
MAX_PROMPT_CHARS = 50_000
"""Counted in characters (code points), as Cordum counts runes."""
MAX_LABELS = 50
MAX_LABEL_KEY = 256
MAX_LABEL_VALUE = 4096
MAX_TAGS = 50
MAX_LIST_ITEM_CHARS = 256
"""Each item of ``risk_tags``, ``requires`` and ``tags``: the kernel matches them whole."""
ID_FIELDS = ("adapter_id", "memory_id", "context_mode", "tenant_id", "principal_id",
             "actor_id", "pack_id", "capability", "org_id", "team_id", "project_id")
"""Body fields that name something: they end up in headers, logs and keys, so they
carry no control characters."""

PRIORITIES = {"interactive": 1, "batch": 2, "critical": 3}


class ReservedLabel(InvalidRequest):
    """A label only the platform sets (an approval, a bypass, a workflow, ...)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"label {key[:64]} is reserved: the platform sets it",
                         "reserved_label")


class SubmitJobRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    topic: str = Field(default="job.default", max_length=MAX_TOPIC_CHARS, pattern=TOPIC_PATTERN)
    adapter_id: str = ""
    priority: Literal["interactive", "batch", "critical"] = "interactive"
    context: Any = None
    memory_id: str = ""
    context_mode: str = ""
    tenant_id: str = ""
    principal_id: str = ""
    actor_id: str = ""
    actor_type: Literal["", "human", "service"] = ""
    idempotency_key: str = ""
    pack_id: str = ""
    capability: str = ""
    org_id: str = ""
    team_id: str = ""
    project_id: str = ""
    risk_tags: list[str] = Field(default_factory=list, max_length=1000)
    requires: list[str] = Field(default_factory=list, max_length=1000)
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    labels: dict[str, str] = Field(default_factory=dict)
    max_input_tokens: int = Field(default=8000, ge=0, le=10_000_000_000)
    max_output_tokens: int = Field(default=1024, ge=0, le=10_000_000_000)
    max_total_tokens: int = Field(default=0, ge=0, le=10_000_000_000)
    deadline_ms: int = Field(default=0, ge=0, le=10_000_000_000)
    allow_summarization: bool = False
    allow_retrieval: bool = False

    @field_validator("idempotency_key")
    @classmethod
    def _idempotency_key(cls, key: str) -> str:
        problem = idempotency_key_error(key)
        if problem:
            raise ValueError(problem)
        return key

    @field_validator(*ID_FIELDS)
    @classmethod
    def _id(cls, value: str) -> str:
        if has_control_chars(value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("risk_tags", "requires", "tags")
    @classmethod
    def _items(cls, items: list[str]) -> list[str]:
        for i, item in enumerate(items):
            if len(item) > MAX_LIST_ITEM_CHARS:
                raise ValueError(f"item {i} longer than {MAX_LIST_ITEM_CHARS} characters")
            if has_control_chars(item):
                raise ValueError(f"item {i} contains control characters")
        return items

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) > MAX_LABELS:
            raise ValueError(f"at most {MAX_LABELS} labels")
        for key, value in labels.items():
            if len(key) > MAX_LABEL_KEY:
                raise ValueError(f"label key longer than {MAX_LABEL_KEY}: {key[:40]!r}...")
            if has_control_chars(key):
                raise ValueError(f"label key {key[:40]!r} contains control characters")
            if len(value) > MAX_LABEL_VALUE:
                raise ValueError(f"label {key} value longer than {MAX_LABEL_VALUE}")
            if is_reserved_label(key):
                # Not a validation error: its own code, so a client can tell a label
                # the platform writes (an approval, a bypass, ...) from a malformed one.
                raise ReservedLabel(key)
        return labels

    def fingerprint(self) -> str:
        """What makes two submits the same request, for idempotency conflicts.

        The validated body (so ignored fields do not count) without the
        idempotency key itself, which may arrive in a header.
        """
        doc = self.model_dump(mode="json", exclude={"idempotency_key"})
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()
