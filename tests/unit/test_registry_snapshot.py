"""The worker snapshot document: what the bridge writes is what the readers read."""

from __future__ import annotations

import json

import pytest

from cordum.config import PoolsConfig
from cordum.protocol import Heartbeat
from cordum.registry.live import LiveRegistry
from cordum.registry.pools import pool_serves, topic_pools
from cordum.registry.snapshot import (
    decode_snapshot,
    encode_snapshot,
    parse_snapshot,
    rfc3339_from_epoch_s,
)

NOW = 1_700_000_000.0


def test_a_written_snapshot_reads_back_as_the_same_workers():
    # Given a registry that heard from two workers
    registry = LiveRegistry(clock=lambda: NOW)
    registry.record(Heartbeat(worker_id="b", pool="p", active_jobs=2, max_parallel_jobs=4,
                              cpu_load=12.3, capabilities=["job.a"], labels={"zone": "z"}))
    registry.record(Heartbeat(worker_id="a", pool="p"))

    # When its document is encoded and decoded
    raw = encode_snapshot(registry.snapshot({"job.a": "p"}, writer_id="w-1"))
    stored = decode_snapshot(raw)

    # Then every field survives, at second precision
    assert stored.problem is None and stored.writer_id == "w-1"
    assert stored.captured_at == rfc3339_from_epoch_s(NOW) == "2023-11-14T22:13:20Z"
    a, b = stored.workers
    assert (a.worker_id, b.worker_id) == ("a", "b")
    assert b.cpu_load == 12.3 and b.capabilities == ("job.a",) and b.labels == {"zone": "z"}
    assert b.active_jobs == 2 and b.max_parallel_jobs == 4 and b.last_seen == NOW
    assert a.cpu_load == 0.0 and a.gpu_utilization == 0.0


def test_a_snapshot_read_by_another_bridge_replica_keeps_its_fresh_workers():
    writer = LiveRegistry(clock=lambda: NOW)
    writer.record(Heartbeat(worker_id="w", pool="p", active_jobs=1))
    document = json.loads(encode_snapshot(writer.snapshot({}, writer_id="x")))

    reader = LiveRegistry(clock=lambda: NOW + 10)

    assert reader.hydrate(document) == 1
    assert reader.snapshot({}, writer_id="y")["workers"] == document["workers"]


def test_a_corrupt_snapshot_says_what_is_wrong_and_has_no_workers():
    assert decode_snapshot(None).problem == "missing"
    assert decode_snapshot(b"{no").problem == "not valid JSON"
    assert decode_snapshot(b"[]").problem == "not a JSON object"
    assert decode_snapshot(b'{"workers": {"w": 1}}').problem == "its workers field is not a list"
    assert parse_snapshot(b'{"workers": {"w": 1}}') == []


def test_pools_of_a_topic_and_the_jobs_a_pool_may_take():
    pools = PoolsConfig.model_validate({
        "topics": {"job.a": ["p1", "p2"], "job.b": "p3", "job.none": []},
        "pools": {"p2": {"status": "draining"}},
    })
    assert topic_pools(pools) == {"job.a": "p1", "job.b": "p3"}
    assert pool_serves(pools, "p1", "job.a", {})
    assert not pool_serves(pools, "p2", "job.a", {})  # draining takes no new work
    assert pool_serves(pools, "p2", "job.x", {"target_pool": "p2"})
    assert pool_serves(pools, "gpu", "job.gpu.train", {})
    assert not pool_serves(pools, "gpu", "job.b", {"pool": "cpu"})


@pytest.mark.parametrize(("label", "expected"), [
    ("1764183600.250", 1764183600.25),
    ("", None), ("soon", None), ("0", None), ("-5", None), ("nan", None), ("inf", None),
])
def test_a_workers_start_is_read_from_its_label_and_garbage_is_no_start(label, expected):
    from cordum.registry.workers import STARTED_AT_LABEL, WorkerInfo

    labels = {STARTED_AT_LABEL: label} if label else {}
    assert WorkerInfo("w", "p", labels=labels).started_at == expected
