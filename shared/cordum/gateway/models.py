"""Request bodies of the HTTP API (Cordum's field names and limits)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOPIC_PATTERN = r"^job\.[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
MAX_PROMPT_CHARS = 50_000
MAX_LABELS = 50
MAX_LABEL_KEY = 256
MAX_LABEL_VALUE = 4096

PRIORITIES = {"interactive": 1, "batch": 2, "critical": 3}


class SubmitJobRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    topic: str = Field(default="job.default", max_length=256, pattern=TOPIC_PATTERN)
    adapter_id: str = ""
    priority: Literal["interactive", "batch", "critical"] = "interactive"
    context: Any = None
    memory_id: str = ""
    context_mode: str = ""
    tenant_id: str = ""
    principal_id: str = ""
    actor_id: str = ""
    actor_type: Literal["", "human", "service"] = ""
    idempotency_key: str = Field(default="", max_length=512)
    pack_id: str = ""
    capability: str = ""
    org_id: str = ""
    team_id: str = ""
    project_id: str = ""
    risk_tags: list[str] = Field(default_factory=list, max_length=1000)
    requires: list[str] = Field(default_factory=list, max_length=1000)
    tags: list[str] = Field(default_factory=list, max_length=50)
    labels: dict[str, str] = Field(default_factory=dict)
    max_input_tokens: int = Field(default=8000, ge=0, le=10_000_000_000)
    max_output_tokens: int = Field(default=1024, ge=0, le=10_000_000_000)
    max_total_tokens: int = Field(default=0, ge=0, le=10_000_000_000)
    deadline_ms: int = Field(default=0, ge=0, le=10_000_000_000)
    allow_summarization: bool = False
    allow_retrieval: bool = False

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) > MAX_LABELS:
            raise ValueError(f"at most {MAX_LABELS} labels")
        kept = {}
        for key, value in labels.items():
            if len(key) > MAX_LABEL_KEY:
                raise ValueError(f"label key longer than {MAX_LABEL_KEY}: {key[:40]}...")
            if len(value) > MAX_LABEL_VALUE:
                raise ValueError(f"label {key} value longer than {MAX_LABEL_VALUE}")
            if key.startswith(("_governance.", "_ma.")):
                raise ValueError(f"label {key} is reserved")
            if key.startswith("_"):
                continue  # system labels are set by the gateway, never by a caller
            kept[key] = value
        return kept
