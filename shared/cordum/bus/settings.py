"""What the bridge reads from the environment besides the common ``Settings``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cordum.config import LogLevel, load_model
from cordum.registry.snapshot import SNAPSHOT_INTERVAL_S

ENV_SUBMIT_QUEUE_URL = "SUBMIT_QUEUE_URL"
ENV_RESULT_QUEUE_URL = "RESULT_QUEUE_URL"
ENV_SNAPSHOT_INTERVAL = "WORKER_SNAPSHOT_INTERVAL"
ENV_LOG_LEVEL = "LOG_LEVEL"
ENV_HEALTH_FILE = "BRIDGE_HEALTH_FILE"
ENV_EMF_METRICS = "BRIDGE_EMF_METRICS"
ENV_STREAM_REPLICAS = "JOB_STREAM_REPLICAS"


class BridgeSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    submit_queue_url: str = Field(min_length=1)
    result_queue_url: str = Field(min_length=1)
    snapshot_interval_s: float = Field(default=SNAPSHOT_INTERVAL_S, gt=0)
    log_level: LogLevel = "INFO"
    health_file: Path | None = None
    """Touched after every answered forwarding probe (cordum.bus.health); the
    container's health check reads it. None: no file (a bridge outside ECS)."""
    emf_metrics: bool = False
    """Write the forwarding lag as EMF lines on stdout, for CloudWatch."""
    stream_replicas: int = Field(default=1, ge=1, le=5)
    """Replicas of the job stream when the bridge creates it (JetStream allows 1 to 5):
    3 on a three-node cluster, so a lost node loses no job."""


_BRIDGE_ENV = {
    "submit_queue_url": ENV_SUBMIT_QUEUE_URL,
    "result_queue_url": ENV_RESULT_QUEUE_URL,
    "snapshot_interval_s": ENV_SNAPSHOT_INTERVAL,
    "log_level": ENV_LOG_LEVEL,
    "health_file": ENV_HEALTH_FILE,
    "emf_metrics": ENV_EMF_METRICS,
    "stream_replicas": ENV_STREAM_REPLICAS,
}


def load_bridge_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> BridgeSettings:
    return load_model(BridgeSettings, _BRIDGE_ENV, env, **overrides)
