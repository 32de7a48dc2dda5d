"""Settings from the environment and the pools / timeouts / safety YAML files.

One ``Settings`` per process, read once at start; a bad value fails fast with
the variable's name in the message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cordum.logs import parse_level

LogLevel = Annotated[str, AfterValidator(parse_level)]
"""A logging level name, upper-cased (the bridge's and the echo worker's LOG_LEVEL)."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_SAFETY_KERNEL_ADDR = "127.0.0.1:50051"
DEFAULT_OUTPUT_HOLD_MAX_S = 600.0
"""How long an output whose content check finds no kernel waits, unserved, for one that
answers: a kernel restart or deploy fits well inside, a workflow step is not stalled
for long, and twenty re-checks (one per 30 s tick) fall within it."""

DEFAULT_JOB_RETENTION_S = 3 * 24 * 3600
"""How long a terminal job (meta, request, event log, index entries) stays in Redis.

Sized for the stack's default cache, 2x cache.t4g.small: 1.37 GiB maxmemory, 25 %
reserved, so about 1.03 GiB (1.1 GB) for data. A job costs about 4.35 KB while its
context and result live (24 h) and about 3.9 KB after (BENCHMARKS.md, sustained load:
4,200 B of keys plus a tenant index entry). At 1M jobs a month (33,000 a day), 3 days
hold about 0.4 GB, 36 % of the cache: room under the 80 % memory alarm for a month
twice as busy, the DLQ (30 days) and workflow runs. Cordum's 7 days would hold 0.93 GB
(84 %) at the same load and refuse writes soon after. docs/deploy-sizing.md has the table
per node type."""
MIN_JOB_RETENTION_S = 3600
"""A terminal job outlives the events about it: a workflow's job-ended event, a late
duplicate result (SQS redelivery, 6 x the consumer timeout) and a client polling for
the outcome all read the meta within minutes."""
MAX_JOB_RETENTION_S = 365 * 24 * 3600
JOB_RETENTION_ENV = "CORDUM_JOB_RETENTION_S"
JOB_RETENTION_ALIASES = ("JOB_META_TTL_SECONDS", "JOB_META_TTL")
"""Cordum's names for the same setting, read when CORDUM_JOB_RETENTION_S is unset:
seconds, and a Go duration (``72h``, ``90m``, ``1h30m``, or plain seconds)."""

M = TypeVar("M", bound=BaseModel)


class ConfigError(RuntimeError):
    """A setting or a config file is missing or malformed."""


class Settings(BaseModel):
    """Process settings. Explicit arguments win over the environment."""

    model_config = ConfigDict(frozen=True)

    redis_url: str = DEFAULT_REDIS_URL
    # Redis AUTH (ElastiCache): the token itself, or the Secrets Manager secret
    # holding it (read once per process, see cordum.runtime.redis_auth_token).
    redis_auth_token: SecretStr | None = None
    redis_auth_secret_arn: str | None = None
    # The ACL user the process connects as (with the token as its password); the
    # secret may hold both as {"username", "password"}, a URL may carry both.
    redis_username: str | None = None
    # Connections the process's Redis pool may open; None: the figure for its kind
    # (cordum.runtime.redis_max_connections).
    redis_max_connections: int | None = Field(default=None, ge=1)
    # NATS credentials (a .creds file's text) in Secrets Manager, for a secured cluster.
    nats_creds_secret_arn: str | None = None
    # PEM of the CA the NATS servers' certificates are verified against (or a file).
    nats_tls_ca: str | None = None
    nats_url: str = DEFAULT_NATS_URL
    safety_kernel_addr: str = DEFAULT_SAFETY_KERNEL_ADDR
    config_dir: Path = Path("config")
    # How long a gateway or function waits on Redis / NATS before answering 503 or retrying.
    store_timeout_s: float = Field(default=2.0, gt=0)
    publish_timeout_s: float = Field(default=2.0, gt=0)
    safety_timeout_s: float = Field(default=2.0, gt=0)
    # Cordum's OUTPUT_POLICY_ENABLED: check SUCCEEDED results against output_rules.
    output_policy_enabled: bool = False
    # Two people for a policy change: a change that alters the bundles in force (a
    # publish, a rollback, an edit or delete of a bundle in force) is held as a
    # proposal until a second identity confirms it (docs/policy.md).
    policy_two_person: bool = False
    # How long a SUCCEEDED output whose content check could not reach the kernel
    # (fail-closed) is held unserved and checked again, before it is quarantined
    # with output_check_unavailable.
    output_hold_max_s: float = Field(default=DEFAULT_OUTPUT_HOLD_MAX_S, gt=0)
    # Workflows: the two queues that carry run events (FIFO, one message group per
    # run) and timers (standard, per-message delays), and a tenant's open-run limit
    # (0: none), over which a start answers 429 RUN_NOT_RUNNABLE.
    workflow_queue_url: str = ""
    workflow_timer_queue_url: str = ""
    workflow_max_active_runs: int = Field(default=100, ge=0)
    # How long a terminal job stays in Redis (the TTL its last transition sets); an
    # open job keeps cordum.store.jobs.META_TTL_S from its last write.
    job_retention_s: int = Field(default=DEFAULT_JOB_RETENTION_S, ge=MIN_JOB_RETENTION_S,
                                 le=MAX_JOB_RETENTION_S)
    # The audit export (cordum.store.audit_export): the S3 bucket the chains are
    # exported to ("": no export, the audit tick only drains the outboxes), and how
    # many of a chain's last entries stay in Redis once exported.
    audit_bucket: str = ""
    audit_keep_entries: int = Field(default=10_000, ge=0)
    # The artifacts bucket (cordum.store.artifact_objects): where large artifacts are
    # uploaded through presigned URLs ("": inline artifacts only, up to 4 MiB).
    artifact_bucket: str = ""

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    @field_validator("redis_auth_token", "redis_auth_secret_arn")
    @classmethod
    def _auth_over_tls(cls, v: object, info: ValidationInfo) -> object:
        # The token is a password: never let it cross the network in clear text.
        if v is not None and str(info.data.get("redis_url", "")).startswith("redis://"):
            raise ValueError("a Redis AUTH token is sent over TLS only: REDIS_URL must be rediss://")
        return v

    @field_validator("nats_url")
    @classmethod
    def _nats_scheme(cls, v: str) -> str:
        if not all(u.strip().startswith(("nats://", "tls://")) for u in v.split(",")):
            raise ValueError("must be nats:// or tls:// URLs, comma separated")
        return v


_ENV = {
    "redis_url": "REDIS_URL",
    "redis_auth_token": "REDIS_AUTH_TOKEN",
    "redis_auth_secret_arn": "REDIS_AUTH_SECRET_ARN",
    "redis_username": "REDIS_USERNAME",
    "redis_max_connections": "CORDUM_REDIS_MAX_CONNECTIONS",
    "nats_creds_secret_arn": "NATS_CREDS_SECRET_ARN",
    "nats_tls_ca": "NATS_TLS_CA",
    "nats_url": "NATS_URL",
    "safety_kernel_addr": "SAFETY_KERNEL_ADDR",
    "config_dir": "CORDUM_CONFIG_DIR",
    "store_timeout_s": "CORDUM_STORE_TIMEOUT_S",
    "publish_timeout_s": "CORDUM_PUBLISH_TIMEOUT_S",
    "safety_timeout_s": "CORDUM_SAFETY_TIMEOUT_S",
    "output_policy_enabled": "OUTPUT_POLICY_ENABLED",
    "policy_two_person": "CORDUM_POLICY_TWO_PERSON",
    "output_hold_max_s": "CORDUM_OUTPUT_HOLD_MAX_S",
    "workflow_queue_url": "WORKFLOW_QUEUE_URL",
    "workflow_timer_queue_url": "WORKFLOW_TIMER_QUEUE_URL",
    "workflow_max_active_runs": "CORDUM_WORKFLOW_MAX_ACTIVE_RUNS",
    "job_retention_s": JOB_RETENTION_ENV,
    "audit_bucket": "CORDUM_AUDIT_BUCKET",
    "audit_keep_entries": "CORDUM_AUDIT_KEEP_ENTRIES",
    "artifact_bucket": "CORDUM_ARTIFACT_BUCKET",
}

_GO_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?$")


def _retention_env(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, seconds as text) of the retention: CORDUM_JOB_RETENTION_S, else
    Cordum's JOB_META_TTL_SECONDS, else JOB_META_TTL (a Go duration); None: unset."""
    for var in (JOB_RETENTION_ENV, *JOB_RETENTION_ALIASES):
        raw = (env.get(var) or "").strip()
        if not raw:
            continue
        if var != "JOB_META_TTL" or raw.isdigit():
            return var, raw
        match = _GO_DURATION.match(raw)
        if match is None or not any(match.groups()):
            raise ConfigError(f"{var}: not a duration in h, m and s (e.g. 72h): {raw}")
        hours, minutes, seconds = (int(g or 0) for g in match.groups())
        return var, str(hours * 3600 + minutes * 60 + seconds)
    return None


def load_model(model: type[M], names: Mapping[str, str],
               env: Mapping[str, str] | None = None, **overrides: Any) -> M:
    """The settings ``model`` of a process, from the environment.

    ``names`` maps each field to its variable; a variable that is unset or empty
    leaves the field's default. Explicit ``overrides`` (None means "not given")
    win over the environment. A bad value raises ``ConfigError`` naming the
    variable, so a process fails at start and says which setting to fix.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {field: env[var] for field, var in names.items() if env.get(var)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return model(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        raise ConfigError(f"{names.get(field, field)}: {first['msg']}") from exc


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    env = os.environ if env is None else env
    names: Mapping[str, str] = _ENV
    retention = _retention_env(env)
    if retention is not None:
        # The variable that gave it (an alias of Cordum's included), its value in
        # seconds: a bad value is reported under the name the operator set.
        var, seconds = retention
        env = {**env, var: seconds}
        names = {**_ENV, "job_retention_s": var}
    config_dir = overrides.get("config_dir") or env.get(_ENV["config_dir"])
    if config_dir:
        overrides["config_dir"] = _resolve_config_dir(Path(config_dir), env)
    return load_model(Settings, names, env, **overrides)


def _resolve_config_dir(path: Path, env: Mapping[str, str]) -> Path:
    # In Lambda the config travels with the function code: a relative dir is
    # relative to the task root, not to whatever the working directory is.
    if not path.is_absolute() and env.get("LAMBDA_TASK_ROOT"):
        return Path(env["LAMBDA_TASK_ROOT"]) / path
    return path


@lru_cache(maxsize=1)
def settings() -> Settings:
    return load_settings()


class PoolConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    requires: list[str] = Field(default_factory=list)
    status: str = "active"
    description: str = ""

    @field_validator("status")
    @classmethod
    def _status(cls, v: str) -> str:
        if v not in ("active", "draining", "inactive"):
            raise ValueError("status must be active, draining or inactive")
        return v


class PoolsConfig(BaseModel):
    """pools.yaml: which pools serve a topic, and what each pool offers."""

    model_config = ConfigDict(extra="forbid")

    topics: dict[str, list[str]]
    pools: dict[str, PoolConfig] = Field(default_factory=dict)

    @field_validator("topics", mode="before")
    @classmethod
    def _topic_lists(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: [p] if isinstance(p, str) else p for k, p in v.items()}
        return v

    def pools_for(self, topic: str) -> list[str]:
        """Pools that may take new work for ``topic`` (draining/inactive excluded)."""
        return [
            name
            for name in self.topics.get(topic, [])
            if self.pools.get(name, PoolConfig()).status == "active"
        ]


def load_yaml(path: Path) -> Any:
    import yaml  # only the processes that read config files pay for it

    try:
        with path.open(encoding="utf-8") as fh:
            return yaml.safe_load(fh) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def load_pools(config_dir: Path) -> PoolsConfig:
    path = config_dir / "pools.yaml"
    try:
        return PoolsConfig.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(f"{path}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from exc
