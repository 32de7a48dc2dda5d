"""The worker registry read from a real Redis snapshot: freshness, corruption, refresh, merge."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from cordum.registry.reader import SnapshotReader
from cordum.registry.snapshot import HEARTBEAT_TTL_S
from tests.conftest import REDIS_URL
from tests.helpers import free_port

REGISTRY_LOGGER = "cordum.registry.reader"


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry(worker_id: str, seen: float | None, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"worker_id": worker_id, "pool": "default", "active_jobs": 0,
                           "max_parallel_jobs": 4, **fields}
    if seen is not None:
        doc["last_heartbeat"] = rfc3339(seen)
    return doc


def snapshot(*workers: dict[str, Any], captured_at: float | None = None) -> str:
    return json.dumps({
        "captured_at": rfc3339(time.time() if captured_at is None else captured_at),
        "writer_id": "test", "pools": {}, "topics": {}, "workers": list(workers),
    })


class Harness:
    def __init__(self, unique: str) -> None:
        self.key = f"test:workers:snapshot:{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.gets = 0

    async def get(self, name: str) -> Any:
        self.gets += 1
        return await self.redis.get(name)

    def registry(self, **kwargs: Any) -> SnapshotReader:
        kwargs.setdefault("max_age_s", 0)
        return SnapshotReader(self, key=self.key, **kwargs)

    async def write(self, document: str) -> None:
        await self.redis.set(self.key, document, ex=60)


@pytest.fixture
def env(unique):
    loop = asyncio.new_event_loop()
    h = Harness(unique)
    yield loop, h
    loop.run_until_complete(h.redis.delete(h.key))
    loop.run_until_complete(h.redis.aclose())
    loop.close()


def ids(workers) -> list[str]:
    return [w.worker_id for w in workers]


def test_a_worker_silent_for_40_seconds_is_never_returned(env):
    loop, h = env
    now = time.time()
    loop.run_until_complete(h.write(snapshot(
        entry("fresh", now - 2, cpu_load=12.5, labels={"placement.region": "eu"}),
        entry("stale", now - 40),
    )))
    registry = h.registry()

    workers = loop.run_until_complete(registry.workers())

    assert ids(workers) == ["fresh"]
    fresh = workers[0]
    assert fresh.cpu_load == 12.5 and fresh.gpu_utilization == 0.0
    assert fresh.labels == {"placement.region": "eu"}
    assert fresh.last_seen == pytest.approx(now - 2, abs=1)
    assert registry.is_alive("fresh") and not registry.is_alive("stale")
    assert not registry.is_alive("never-heard-of")


def test_missing_heartbeat_time_falls_back_to_captured_at(env):
    loop, h = env
    now = time.time()
    registry = h.registry()

    loop.run_until_complete(h.write(snapshot(entry("w1", None), captured_at=now - 1)))
    assert ids(loop.run_until_complete(registry.workers())) == ["w1"]

    old = h.registry()
    loop.run_until_complete(h.write(snapshot(entry("w1", None), captured_at=now - 40)))
    assert loop.run_until_complete(old.workers()) == []


def test_workers_expire_between_reads(env):
    loop, h = env
    now = [time.time()]
    loop.run_until_complete(h.write(snapshot(entry("w1", now[0]), entry("w2", now[0] - 20))))
    registry = h.registry(max_age_s=3600, clock=lambda: now[0])
    assert ids(loop.run_until_complete(registry.workers())) == ["w1", "w2"]

    now[0] += HEARTBEAT_TTL_S - 15  # w2 last heard 35 s ago; the copy is not re-read

    assert ids(loop.run_until_complete(registry.workers())) == ["w1"]
    assert not registry.is_alive("w2") and h.gets == 1


def test_corrupt_or_missing_snapshot_is_a_cold_start_with_one_warning(env, caplog):
    loop, h = env
    caplog.set_level(logging.INFO, logger=REGISTRY_LOGGER)
    registry = h.registry()

    loop.run_until_complete(h.write("{not json"))
    for _ in range(5):
        assert loop.run_until_complete(registry.workers()) == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not valid JSON" in warnings[0].getMessage()

    # Readable again, then gone: the next outage is reported once more.
    loop.run_until_complete(h.write(snapshot(entry("w1", time.time()))))
    assert ids(loop.run_until_complete(registry.workers())) == ["w1"]
    loop.run_until_complete(h.redis.delete(h.key))
    for _ in range(3):
        assert ids(loop.run_until_complete(registry.workers())) == ["w1"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "missing" in warnings[1].getMessage()

    cold = h.registry()
    loop.run_until_complete(h.write(json.dumps(["a", "list"])))
    assert loop.run_until_complete(cold.workers()) == []


def test_unreachable_redis_is_no_workers_not_an_error(env, caplog):
    loop, _ = env
    dead = aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2,
                          retry=Retry(NoBackoff(), 0))
    registry = SnapshotReader(dead, max_age_s=0)
    caplog.set_level(logging.WARNING, logger=REGISTRY_LOGGER)

    assert loop.run_until_complete(registry.workers()) == []
    assert loop.run_until_complete(registry.workers()) == []
    assert len(caplog.records) == 1 and "unreadable" in caplog.records[0].getMessage()
    loop.run_until_complete(dead.aclose())


def test_snapshot_is_reread_only_after_max_age(env):
    loop, h = env
    now = time.time()
    ticks = [0.0]
    loop.run_until_complete(h.write(snapshot(entry("w1", now))))
    registry = h.registry(max_age_s=0.3, monotonic=lambda: ticks[0])
    assert ids(loop.run_until_complete(registry.workers())) == ["w1"]

    loop.run_until_complete(h.write(snapshot(entry("w1", now), entry("w2", now))))
    ticks[0] += 0.3  # as old as max_age, not older: the copy still serves
    assert ids(loop.run_until_complete(registry.workers())) == ["w1"]
    assert h.gets == 1

    ticks[0] += 0.05
    assert ids(loop.run_until_complete(registry.workers())) == ["w1", "w2"]
    assert h.gets == 2

    loop.run_until_complete(h.write(snapshot(entry("w3", now))))
    assert "w3" in ids(loop.run_until_complete(registry.workers(refresh=True)))
    assert h.gets == 3


def test_a_fresh_container_reads_before_its_first_pick_and_batches_share_one_read(env):
    loop, h = env
    loop.run_until_complete(h.write(snapshot(entry("w1", time.time()))))
    registry = h.registry(max_age_s=5)

    async def batch():
        return await asyncio.gather(*(registry.workers() for _ in range(10)))

    results = loop.run_until_complete(batch())
    assert all(ids(r) == ["w1"] for r in results)
    assert h.gets == 1


def test_later_snapshots_merge_by_worker_the_newest_heartbeat_winning(env):
    # Cordum's TestHydrateFromSnapshot_MergeWithLiveHeartbeats: 2 hydrated + 1 new = 3,
    # and the newer report of w1 overrides the hydrated one.
    loop, h = env
    now = time.time()
    registry = h.registry()
    loop.run_until_complete(h.write(snapshot(entry("w1", now - 10, active_jobs=1),
                                             entry("w2", now - 10, active_jobs=2))))
    assert ids(loop.run_until_complete(registry.workers())) == ["w1", "w2"]

    loop.run_until_complete(h.write(snapshot(entry("w1", now - 1, active_jobs=7),
                                             entry("w3", now - 1))))
    workers = {w.worker_id: w for w in loop.run_until_complete(registry.workers())}
    assert sorted(workers) == ["w1", "w2", "w3"]
    assert workers["w1"].active_jobs == 7 and workers["w2"].active_jobs == 2

    # A snapshot written from an older view does not roll w1 back.
    loop.run_until_complete(h.write(snapshot(entry("w1", now - 5, active_jobs=0))))
    workers = {w.worker_id: w for w in loop.run_until_complete(registry.workers())}
    assert workers["w1"].active_jobs == 7


def test_dispatches_count_until_the_next_snapshot(env):
    loop, h = env
    now = time.time()
    loop.run_until_complete(h.write(snapshot(entry("w1", now, active_jobs=1), entry("w2", now))))
    registry = h.registry(max_age_s=3600)
    before = loop.run_until_complete(registry.workers())

    registry.record_dispatch("w2")
    registry.record_dispatch("w2")
    registry.record_dispatch("gone")

    after = {w.worker_id: w.active_jobs for w in loop.run_until_complete(registry.workers())}
    assert after == {"w1": 1, "w2": 2}
    assert {w.worker_id: w.active_jobs for w in before} == {"w1": 1, "w2": 0}

    loop.run_until_complete(h.write(snapshot(entry("w1", now, active_jobs=1),
                                             entry("w2", now, active_jobs=1))))
    reread = loop.run_until_complete(registry.workers(refresh=True))
    assert {w.worker_id: w.active_jobs for w in reread} == {"w1": 1, "w2": 1}
