"""What the echo worker reads from the environment besides the common ``Settings``."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum.config import LogLevel, load_model

ENV_WORKER_ID = "WORKER_ID"
ENV_WORKER_POOL = "WORKER_POOL"
ENV_WORKER_TOPICS = "WORKER_TOPICS"
ENV_WORKER_MAX_PARALLEL = "WORKER_MAX_PARALLEL"
ENV_LOG_LEVEL = "LOG_LEVEL"
ENV_WORKER_RECEIPTS = "WORKER_RECEIPTS_PATH"


def default_worker_id() -> str:
    # The id becomes one token of a NATS subject: no dots, spaces or wildcards.
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"echo-{host}-{secrets.token_hex(2)}"


class EchoWorkerSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    worker_id: str = Field(default_factory=default_worker_id, min_length=1)
    pool: str = "default"
    topics: tuple[str, ...] = ("job.default", "job.echo")
    max_parallel: int = Field(default=4, ge=1)
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    log_level: LogLevel = "INFO"
    receipts_path: str = ""
    """A file each received job id is appended to, one per line, before the job runs
    (the chaos suite counts deliveries at the worker with it); "" = none."""

    @field_validator("worker_id")
    @classmethod
    def _subject_token(cls, v: str) -> str:
        if any(c.isspace() or c in "*>" for c in v):
            raise ValueError("must not contain spaces or the NATS wildcards * and >")
        return v

    @field_validator("topics", mode="before")
    @classmethod
    def _topic_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            return tuple(t.strip() for t in v.split(",") if t.strip())
        return v



_ENV = {
    "worker_id": ENV_WORKER_ID,
    "pool": ENV_WORKER_POOL,
    "topics": ENV_WORKER_TOPICS,
    "max_parallel": ENV_WORKER_MAX_PARALLEL,
    "log_level": ENV_LOG_LEVEL,
    "receipts_path": ENV_WORKER_RECEIPTS,
}


def load_worker_settings(
    env: Mapping[str, str] | None = None, **overrides: Any
) -> EchoWorkerSettings:
    return load_model(EchoWorkerSettings, _ENV, env, **overrides)
