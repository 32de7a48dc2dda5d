"""Pure pieces of the scheduler: queue record decoding, snapshot parsing, the pick."""

from __future__ import annotations

import base64
import json

import pytest

from cordum import protocol
from cordum.config import ConfigError, PoolsConfig, load_settings
from cordum.registry.snapshot import parse_snapshot
from cordum.registry.workers import WorkerInfo
from cordum.scheduler.batch import record_bytes
from cordum.scheduler.errors import UnparseableRecord
from cordum.scheduler.strategy import LeastLoadedStrategy, NoEligibleWorkers


def test_record_bytes_decodes_base64_and_rejects_anything_else():
    assert record_bytes(base64.b64encode(b"\x01\x02").decode()) == b"\x01\x02"
    for body in ("not base64!", "é"):
        with pytest.raises(UnparseableRecord):
            record_bytes(body)


def test_snapshot_parsing_skips_bad_entries_and_survives_corruption():
    doc = {"workers": [{"worker_id": "w1", "pool": "p", "active_jobs": 2},
                       {"worker_id": "", "pool": "p"}, "junk"]}
    workers = parse_snapshot(json.dumps(doc))
    assert [w.worker_id for w in workers] == ["w1"] and workers[0].active_jobs == 2
    assert parse_snapshot(b"{corrupt") == []
    assert parse_snapshot(None) == []


def test_pick_is_least_active_then_worker_id_within_the_topic_pools():
    workers = [WorkerInfo("b", "p", 1), WorkerInfo("a", "p", 1), WorkerInfo("c", "q", 0)]
    strategy = LeastLoadedStrategy(PoolsConfig(
        topics={"job.p": ["p"], "job.qp": ["q", "p"], "job.r": ["r"]},
        pools={"p": {}, "q": {}, "r": {}}))

    def pick(topic: str) -> str:
        return strategy.pick_worker(protocol.JobRequest(job_id="j", topic=topic),
                                    workers).worker_id

    assert pick("job.p") == "a"
    assert pick("job.qp") == "c"
    with pytest.raises(NoEligibleWorkers):
        pick("job.r")


def test_pools_config_excludes_draining_and_inactive_pools():
    pools = PoolsConfig.model_validate({
        "topics": {"job.a": ["p1", "p2", "p3"], "job.b": "p1"},
        "pools": {"p2": {"status": "draining"}, "p3": {"status": "inactive"}},
    })
    assert pools.pools_for("job.a") == ["p1"]
    assert pools.pools_for("job.b") == ["p1"]
    assert pools.pools_for("job.none") == []


def test_settings_fail_fast_with_the_variable_name():
    with pytest.raises(ConfigError, match="REDIS_URL"):
        load_settings(env={"REDIS_URL": "http://nope"})
    cfg = load_settings(env={"CORDUM_CONFIG_DIR": "config", "LAMBDA_TASK_ROOT": "/var/task"})
    assert str(cfg.config_dir) == "/var/task/config"
