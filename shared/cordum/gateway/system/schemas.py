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
