"""What cordum-stream reads from the environment besides the common ``Settings``.

Every bound of the service is a field here with its default as a named constant, so
an operator can see (and a test can shorten) each one; a bad value fails the start
naming its variable (``cordum.config.load_model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cordum.config import LogLevel, load_model

DEFAULT_PORT = 8090
DEFAULT_HOST = "0.0.0.0"
DEFAULT_MAX_CONNECTIONS_PER_KEY = 20
"""Streams one API key may hold open on one replica: a dashboard opens one or two, a
key that opens hundreds is a leak or an attack, and each costs a buffer."""
DEFAULT_LOG_MAX_EVENTS = 10_000
"""Events a tenant's log keeps (approximately: Redis trims whole nodes)."""
DEFAULT_LOG_MAX_AGE_S = 3600
"""How long an event stays resumable; an idle tenant's log expires after it."""
DEFAULT_RESULT_SETTLE_S = 10.0
"""How long the writer waits for the platform's decision on a worker's result before it
logs the result without a pointer (the output scan takes milliseconds; a held output
waits for a kernel far longer and is then never shown by the stream)."""
DEFAULT_REPLAY_MAX = 1000
"""Log entries one resume replays at most; more are announced (``stream.truncated``)."""
DEFAULT_CLIENT_BUFFER = 256
"""Events waiting for one client (Cordum's per-client queue); full: the client is closed."""
DEFAULT_KEY_RECHECK_S = 120.0
"""How often an open stream's key is looked up again (a revoked key is cut off)."""
DEFAULT_QUEUE_GROUP = "cordum-stream"
"""The NATS queue group of the taps: one replica of the group writes each event."""
DEFAULT_SUBJECT_PREFIX = "cordum.stream.out"
"""Enriched events go out on ``<prefix>.<tenant>``; every replica reads ``<prefix>.>``."""

MAX_CLIENT_BUFFER = 10_000
MAX_REPLAY = 10_000
MAX_CONNECTIONS_PER_KEY = 10_000
MAX_LOG_EVENTS = 1_000_000
MAX_LOG_AGE_S = 7 * 24 * 3600
MAX_SETTLE_S = 300.0
MAX_RECHECK_S = 24 * 3600.0
SUBJECT_TOKENS = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
"""A queue group or subject prefix: NATS tokens, no wildcard."""

ENV_PORT = "STREAM_PORT"
ENV_HOST = "STREAM_HOST"


class StreamSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    """0: any free port (tests)."""
    host: str = Field(default=DEFAULT_HOST, min_length=1)
    max_connections_per_key: int = Field(default=DEFAULT_MAX_CONNECTIONS_PER_KEY, ge=1,
                                         le=MAX_CONNECTIONS_PER_KEY)
    log_max_events: int = Field(default=DEFAULT_LOG_MAX_EVENTS, ge=1, le=MAX_LOG_EVENTS)
    log_max_age_s: int = Field(default=DEFAULT_LOG_MAX_AGE_S, ge=1, le=MAX_LOG_AGE_S)
    result_settle_s: float = Field(default=DEFAULT_RESULT_SETTLE_S, ge=0, le=MAX_SETTLE_S)
    replay_max: int = Field(default=DEFAULT_REPLAY_MAX, ge=1, le=MAX_REPLAY)
    client_buffer: int = Field(default=DEFAULT_CLIENT_BUFFER, ge=1, le=MAX_CLIENT_BUFFER)
    key_recheck_s: float = Field(default=DEFAULT_KEY_RECHECK_S, gt=0, le=MAX_RECHECK_S)
    emf_metrics: bool = False
    """Write the connection gauge and counters as EMF lines on stdout, for CloudWatch."""
    log_level: LogLevel = "INFO"
    queue_group: str = Field(default=DEFAULT_QUEUE_GROUP, pattern=SUBJECT_TOKENS)
    subject_prefix: str = Field(default=DEFAULT_SUBJECT_PREFIX, pattern=SUBJECT_TOKENS)


_STREAM_ENV = {
    "port": ENV_PORT,
    "host": ENV_HOST,
    "max_connections_per_key": "STREAM_MAX_CONNECTIONS_PER_KEY",
    "log_max_events": "STREAM_LOG_MAX_EVENTS",
    "log_max_age_s": "STREAM_LOG_MAX_AGE_S",
    "result_settle_s": "STREAM_RESULT_SETTLE_S",
    "replay_max": "STREAM_REPLAY_MAX",
    "client_buffer": "STREAM_CLIENT_BUFFER",
    "key_recheck_s": "STREAM_KEY_RECHECK_S",
    "emf_metrics": "STREAM_EMF_METRICS",
    "log_level": "LOG_LEVEL",
    "queue_group": "STREAM_QUEUE_GROUP",
    "subject_prefix": "STREAM_SUBJECT_PREFIX",
}


def load_stream_settings(env: Mapping[str, str] | None = None,
                         **overrides: Any) -> StreamSettings:
    return load_model(StreamSettings, _STREAM_ENV, env, **overrides)
