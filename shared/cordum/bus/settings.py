"""What the bridge reads from the environment besides the common ``Settings``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cordum.config import LogLevel, load_model
from cordum.registry.snapshot import SNAPSHOT_INTERVAL_S

ENV_SUBMIT_QUEUE_URL = "SUBMIT_QUEUE_URL"
ENV_RESULT_QUEUE_URL = "RESULT_QUEUE_URL"
ENV_SNAPSHOT_INTERVAL = "WORKER_SNAPSHOT_INTERVAL"
ENV_LOG_LEVEL = "LOG_LEVEL"


class BridgeSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    submit_queue_url: str = Field(min_length=1)
    result_queue_url: str = Field(min_length=1)
    snapshot_interval_s: float = Field(default=SNAPSHOT_INTERVAL_S, gt=0)
    log_level: LogLevel = "INFO"



_BRIDGE_ENV = {
    "submit_queue_url": ENV_SUBMIT_QUEUE_URL,
    "result_queue_url": ENV_RESULT_QUEUE_URL,
    "snapshot_interval_s": ENV_SNAPSHOT_INTERVAL,
    "log_level": ENV_LOG_LEVEL,
}


def load_bridge_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> BridgeSettings:
    return load_model(BridgeSettings, _BRIDGE_ENV, env, **overrides)
