"""How workers look in API answers (WorkerRuntime, Cordum's field names).

Pure functions of the worker snapshot the bridge wrote; reading it is
``cordum.gateway.system.service``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.gateway.core.times import rfc3339_s

if TYPE_CHECKING:
    from cordum.registry.workers import WorkerInfo

ONLINE_WITHIN_S = 30.0
"""A worker heard from within this long is online (Cordum's heartbeat TTL)."""


def worker_runtime(worker: WorkerInfo, now: float) -> dict[str, Any]:
    """WorkerRuntime (plus ``heartbeat_age_seconds`` and ``online``) at time ``now``."""
    out: dict[str, Any] = {
        "worker_id": worker.worker_id,
        "pool": worker.pool,
        "active_jobs": worker.active_jobs,
        "max_parallel_jobs": worker.max_parallel_jobs,
        "capabilities": list(worker.capabilities),
        "cpu_load": worker.cpu_load,
        "gpu_utilization": worker.gpu_utilization,
        "memory_load": worker.memory_load,
        "region": worker.region,
        "type": worker.type,
        "labels": dict(worker.labels),
        "online": is_online(worker, now),
    }
    if worker.last_seen > 0:
        out["last_heartbeat"] = rfc3339_s(worker.last_seen)
        out["heartbeat_age_seconds"] = round(max(0.0, now - worker.last_seen), 3)
    return out


def is_online(worker: WorkerInfo, now: float) -> bool:
    return worker.last_seen > 0 and now - worker.last_seen <= ONLINE_WITHIN_S
