"""Response bodies of the system routes (workers, status, health), as Cordum's spec has
them (the conventions of ``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, optional


class WorkerRuntime(Body):
    worker_id: str
    pool: str = optional()
    region: str = optional()
    type: str = optional()
    active_jobs: int = optional()
    max_parallel_jobs: int = optional()
    capabilities: list[str] = optional()
    cpu_load: float = optional()
    gpu_utilization: float = optional()
    memory_load: float = optional()
    labels: dict[str, str] = optional()
    last_heartbeat: AwareDatetime = optional()


class WorkerList(Body):
    items: list[WorkerRuntime]


class JobRecord(Body):
    """A job as a worker's job list shows it (Cordum's JobRecord)."""

    id: str
    updated_at: int
    """µs since the epoch of the job's last state change (an integer, as the spec has it)."""
    state: str
    worker_id: str = optional()
    trace_id: str = optional()
    topic: str = optional()
    tenant: str = optional()
    team: str = optional()
    principal: str = optional()
    actor_id: str = optional()
    actor_type: str = optional()
    idempotency_key: str = optional()
    capability: str = optional()
    risk_tags: list[str] = optional()
    requires: list[str] = optional()
    pack_id: str = optional()
    attempts: int = optional()
    safety_decision: str = optional()
    safety_reason: str = optional()
    safety_rule_id: str = optional()
    safety_snapshot: str = optional()
    deadline_unix: int = optional()
    failure_reason: str = optional()


class WorkerJobs(Body):
    items: list[JobRecord]


class BuildInfo(Body):
    version: str = optional()
    commit: str = optional()
    date: str = optional()
    """A plain string, not a date-time, in the spec."""


class ConnectionStatus(Body):
    connected: bool = optional()
    url: str = optional()


class LicenseInfo(Body):
    valid: bool = optional()
    tier: str = optional()


class StatusResponse(Body):
    time: AwareDatetime = optional()
    uptime_seconds: float = optional()
    build: BuildInfo = optional()
    nats: ConnectionStatus = optional()
    redis: ConnectionStatus = optional()
    workers: int = optional()
    """Number of connected workers."""
    license: LicenseInfo | None = optional()


class HealthResponse(Body):
    """``/health`` and ``/api/v1/health``: JSON, as Cordum's gateway answers (200 or 503)."""

    status: Literal["healthy", "unhealthy"]
    redis: Any = optional()
    nats: Any = optional()
    error: str = optional()
    """What is down, when ``status`` is ``unhealthy``."""
