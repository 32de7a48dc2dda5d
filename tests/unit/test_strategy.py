"""Least-loaded routing: Cordum's strategy cases, plus deterministic tie-breaks."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cordum import protocol
from cordum.config import PoolsConfig
from cordum.errors import RetryAfter
from cordum.registry.workers import WorkerInfo, WorkerSnapshot, load_order, load_score
from cordum.scheduler.errors import NoWorkers
from cordum.scheduler.strategy import (
    DEFAULT_OVERLOAD,
    LeastLoadedStrategy,
    NoEligibleWorkers,
    NoPoolMapping,
    OverloadPolicy,
    PoolOverloaded,
    WorkerReadiness,
    eligible_pools,
    placement_labels,
)

ROUTING = PoolsConfig(topics={"job.default": ["default"]}, pools={"default": {}})


def worker(worker_id: str, pool: str = "default", active: int = 0, cpu: float = 0, *,
           max_jobs: int = 0, gpu: float = 0, labels: dict[str, str] | None = None) -> WorkerInfo:
    return WorkerInfo(worker_id, pool, active_jobs=active, max_parallel_jobs=max_jobs,
                      cpu_load=cpu, gpu_utilization=gpu, labels=labels or {})


def job(topic: str = "job.default", labels: dict[str, str] | None = None,
        requires: list[str] | None = None) -> protocol.JobRequest:
    req = protocol.JobRequest(job_id="job-1", topic=topic, labels=labels or {})
    req.meta.requires.extend(requires or [])
    return req


def pick(workers, req=None, routing=ROUTING, readiness=None, strategy=None) -> str:
    """Routes through both paths, a plain list (full scan) and the registry's
    indexed WorkerSnapshot, and checks that they agree."""
    strategy = strategy or LeastLoadedStrategy(routing)
    req = req or job()
    outcomes: list[str | Exception] = []
    for view in (list(workers), WorkerSnapshot(workers)):
        try:
            outcomes.append(strategy.pick(req, view, readiness))
        except Exception as exc:
            outcomes.append(exc)
    scanned, indexed = outcomes
    if isinstance(scanned, Exception):
        assert type(indexed) is type(scanned) and str(indexed) == str(scanned)
        raise scanned
    assert indexed == scanned
    return scanned


# --------------------------------------------------------------- Cordum's cases 1-9


def test_picks_the_lightest_worker_of_the_topic_pool():
    workers = [worker("w1", active=2, cpu=50), worker("w2", active=1, cpu=10),
               worker("w3", "other", 0, 0)]
    assert pick(workers) == "worker.w2.jobs"


def test_load_score_counts_cpu_and_gpu():
    assert pick([worker("w1", active=1, cpu=90), worker("w2", active=1, cpu=10)]) \
        == "worker.w2.jobs"
    assert load_score(worker("w", active=2, cpu=50, gpu=25)) == pytest.approx(2.75)


def test_unknown_topic_has_no_pool_and_no_workers_is_retryable():
    with pytest.raises(NoPoolMapping):
        pick([worker("w1")], job("job.unknown"))
    with pytest.raises(NoWorkers):
        pick([])


def test_preferred_worker_wins_over_a_lighter_one():
    workers = [worker("w1", active=3), worker("w2", active=2), worker("w3", active=0)]
    assert pick(workers, job(labels={"preferred_worker_id": "w2"})) == "worker.w2.jobs"


def test_a_worker_at_capacity_is_overloaded_an_idle_one_is_not():
    with pytest.raises(PoolOverloaded):
        pick([worker("w1", active=1, max_jobs=1)])
    assert pick([worker("w1", active=0, max_jobs=1, cpu=1)]) == "worker.w1.jobs"


def test_overload_thresholds():
    assert DEFAULT_OVERLOAD.is_overloaded(worker("w", cpu=95))
    assert DEFAULT_OVERLOAD.is_overloaded(worker("w", gpu=95))
    assert not DEFAULT_OVERLOAD.is_overloaded(worker("w", cpu=10, gpu=10))
    assert DEFAULT_OVERLOAD.is_overloaded(worker("w", cpu=90))
    assert DEFAULT_OVERLOAD.is_overloaded(worker("w", active=9, max_jobs=10))
    assert not DEFAULT_OVERLOAD.is_overloaded(worker("w", active=8, max_jobs=10))
    # No job limit declared: the job count alone never overloads a worker.
    assert not DEFAULT_OVERLOAD.is_overloaded(worker("w", active=500, max_jobs=0))


def test_readiness_narrows_routing_only_for_workers_that_declared_it():
    workers = [worker("w1"), worker("w2", active=1)]
    readiness = {"w1": WorkerReadiness(False),
                 "w2": WorkerReadiness(True, frozenset({"job.default"}))}
    assert pick(workers, readiness=readiness) == "worker.w2.jobs"

    only_other = {"w1": WorkerReadiness(True, frozenset({"job.other"})),
                  "w2": WorkerReadiness(False)}
    with pytest.raises(NoWorkers):
        pick(workers, readiness=only_other)

    assert pick(workers, readiness={"w2": WorkerReadiness(False)}) == "worker.w1.jobs"
    assert pick(workers, readiness=None) == "worker.w1.jobs"


def test_placement_labels_are_the_prefixed_ones_only():
    labels = {
        "preferred_pool": "p", "preferred_worker_id": "w", "approval_granted": "true",
        "workflow_id": "wf", "amount": "100", "tenant": "t", "team": "x", "priority": "hi",
        "placement.region": "eu", "constraint.gpu": "a100", "node.type": "metal",
    }
    assert placement_labels(labels) == {"placement.region": "eu", "constraint.gpu": "a100",
                                        "node.type": "metal"}
    assert placement_labels({"workflow_id": "wf", "amount": "1"}) == {}


def test_pools_eligible_by_requires():
    routing = PoolsConfig(topics={}, pools={"p1": {"requires": ["linux", "gpu"]},
                                            "p2": {"requires": ["linux"]}, "p3": {}})
    assert eligible_pools(routing, ["p1", "p2", "p3"], ["linux"]) == ["p1", "p2"]
    # Requirements compare trimmed and case-insensitively; none asked: every pool.
    assert eligible_pools(routing, ["p1", "p2", "p3"], ["GPU", " linux "]) == ["p1"]
    assert eligible_pools(routing, ["p3"], ["gpu"]) == []
    assert eligible_pools(routing, ["p1", "p2", "p3"], []) == ["p1", "p2", "p3"]


# --------------------------------------------------------------- where we differ: ties


def test_equal_scores_go_to_fewer_active_jobs_then_to_the_lower_id():
    # Same score 1.0: one active job, or no job but half-busy CPU and GPU.
    busy = worker("a", active=1)
    idle_but_loaded = worker("z", active=0, cpu=50, gpu=50)
    assert pick([busy, idle_but_loaded]) == "worker.z.jobs"

    twins = [worker("w3", active=1), worker("w1", active=1), worker("w2", active=1)]
    for order in itertools.permutations(twins):
        assert pick(list(order)) == "worker.w1.jobs"


WORKER_SPECS = st.tuples(
    st.integers(0, 4),                       # active jobs
    st.sampled_from([0, 25, 50, 95]),        # cpu
    st.sampled_from([0, 50, 95]),            # gpu
    st.integers(0, 8),                       # max parallel jobs
    st.sampled_from(["default", "x"]),       # pool
    st.sampled_from(["eu", "us", None]),     # placement.region label
    st.sampled_from([None, True, False]),    # readiness declared for job.default
)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORKER_SPECS, min_size=1, max_size=12), st.sampled_from(["eu", None]),
       st.integers(-1, 12), st.booleans(), st.randoms(use_true_random=False))
def test_pick_is_the_minimum_of_score_active_id_whatever_the_order(
        specs, region, preferred, track_readiness, rnd):
    workers, readiness = [], {}
    for i, (active, cpu, gpu, max_jobs, pool, label, ready) in enumerate(specs):
        labels = {"placement.region": label} if label else {}
        workers.append(worker(f"w{i:02d}", pool, active, cpu, gpu=gpu, max_jobs=max_jobs,
                              labels=labels))
        if ready is not None:
            readiness[f"w{i:02d}"] = WorkerReadiness(ready, frozenset({"job.default"}))
    rnd.shuffle(workers)
    labels = {"placement.region": region} if region else {}
    if preferred >= 0:
        labels["preferred_worker_id"] = f"w{preferred:02d}"
    ready_map = readiness if track_readiness else None

    def eligible(w):
        return (w.pool == "default" and (not region or w.labels.get("placement.region") == region)
                and (ready_map is None or w.worker_id not in ready_map
                     or ready_map[w.worker_id].ready))

    candidates = [w for w in workers if eligible(w)]
    usable = [w for w in candidates if not DEFAULT_OVERLOAD.is_overloaded(w)]
    if not usable:
        with pytest.raises(PoolOverloaded if candidates else NoEligibleWorkers):
            pick(workers, job(labels=labels), readiness=ready_map)
        return
    chosen = next((w for w in usable if w.worker_id == labels.get("preferred_worker_id")),
                  min(usable, key=lambda w: (load_score(w), w.active_jobs, w.worker_id)))
    assert pick(workers, job(labels=labels), readiness=ready_map) == \
        protocol.direct_subject(chosen.worker_id)


# --------------------------------------------------------------- the indexed snapshot


def test_snapshot_orders_each_pool_lightest_first_and_finds_workers_by_id():
    snap = WorkerSnapshot([worker("b", active=2), worker("a", active=2), worker("c", "x"),
                           worker("d", active=0, cpu=50)])
    assert [w.worker_id for w in snap] == ["a", "b", "c", "d"]
    assert [w.worker_id for w in snap.by_pool["default"]] == ["d", "a", "b"]
    assert snap.get("c").pool == "x" and snap.get("zz") is None


def test_a_replaced_worker_moves_to_its_new_place_and_the_old_snapshot_is_untouched():
    snap = WorkerSnapshot([worker("a", active=0), worker("b", active=1), worker("c", active=2)])
    busier = WorkerInfo("a", "default", active_jobs=3)

    after = snap.replaced(busier)

    assert [w.worker_id for w in after.by_pool["default"]] == ["b", "c", "a"]
    assert after.get("a") is busier
    assert [w.worker_id for w in snap.by_pool["default"]] == ["a", "b", "c"]
    assert snap.get("a").active_jobs == 0
    for members in after.by_pool.values():
        assert members == sorted(members, key=load_order)


# --------------------------------------------------------------- pools, preferences, labels


def test_draining_and_inactive_pools_get_no_new_jobs():
    routing = PoolsConfig(
        topics={"job.default": ["drain", "off", "live"], "job.closed": ["drain", "off"]},
        pools={"drain": {"status": "draining"}, "off": {"status": "inactive"}, "live": {}},
    )
    workers = [worker("d", "drain"), worker("o", "off"), worker("l", "live", active=5)]
    assert pick(workers, routing=routing) == "worker.l.jobs"

    with pytest.raises(NoPoolMapping, match="draining or inactive"):
        pick(workers, job("job.closed"), routing=routing)
    with pytest.raises(NoPoolMapping, match="draining"):
        pick(workers, job(labels={"preferred_pool": "drain"}), routing=routing)


def test_preferred_pool_narrows_the_topic_pools_and_must_be_mapped():
    routing = PoolsConfig(topics={"job.default": ["a", "b"]}, pools={})
    workers = [worker("wa", "a", active=3), worker("wb", "b", active=0)]
    assert pick(workers, job(labels={"preferred_pool": "a"}), routing=routing) == "worker.wa.jobs"

    with pytest.raises(NoPoolMapping, match="not mapped") as info:
        pick(workers, job(labels={"preferred_pool": "elsewhere"}), routing=routing)
    assert info.value.retryable is False and info.value.reason_code == "no_pool_mapping"


def test_requires_are_trimmed_and_case_insensitive_and_unmet_requires_fail():
    routing = PoolsConfig(topics={"job.default": ["cpu", "gpu"]},
                          pools={"cpu": {"requires": ["Linux"]},
                                 "gpu": {"requires": ["linux", "GPU"]}})
    workers = [worker("c", "cpu"), worker("g", "gpu", active=4)]
    assert pick(workers, job(requires=[" gpu ", "LINUX"]), routing=routing) == "worker.g.jobs"
    assert pick(workers, job(requires=["linux"]), routing=routing) == "worker.c.jobs"
    assert pick(workers, job(requires=["  "]), routing=routing) == "worker.c.jobs"
    with pytest.raises(NoPoolMapping, match="requires"):
        pick(workers, job(requires=["tpu"]), routing=routing)


def test_placement_labels_must_match_the_worker_labels_exactly():
    workers = [worker("us", labels={"placement.region": "us"}),
               worker("eu", active=3, labels={"placement.region": "eu", "node.type": "metal"})]
    assert pick(workers, job(labels={"placement.region": "eu"})) == "worker.eu.jobs"
    with pytest.raises(NoEligibleWorkers):
        pick(workers, job(labels={"placement.region": "EU"}))
    # Business labels are not placement: they never exclude a worker.
    assert pick(workers, job(labels={"workflow_id": "wf"})) == "worker.us.jobs"


def test_an_unusable_preferred_worker_falls_back_to_the_lightest():
    workers = [worker("light"), worker("hot", cpu=99), worker("far", "other"),
               worker("us", labels={"placement.region": "us"})]
    for preferred in ("hot", "far", "missing"):
        assert pick(workers, job(labels={"preferred_worker_id": preferred})) \
            == "worker.light.jobs"
    labelled = job(labels={"preferred_worker_id": "light", "placement.region": "us"})
    assert pick(workers, labelled) == "worker.us.jobs"
    not_ready = {"light": WorkerReadiness(False)}
    assert pick(workers, job(labels={"preferred_worker_id": "light"}),
                readiness=not_ready) == "worker.us.jobs"


def test_thresholds_come_from_the_policy():
    strict = LeastLoadedStrategy(ROUTING, OverloadPolicy(utilization=0.5, cpu_load=40))
    with pytest.raises(PoolOverloaded):
        pick([worker("w", active=1, max_jobs=2)], strategy=strict)
    with pytest.raises(PoolOverloaded):
        pick([worker("w", cpu=40)], strategy=strict)
    assert pick([worker("w", active=1, max_jobs=3, cpu=39)], strategy=strict) == "worker.w.jobs"


# --------------------------------------------------------------- errors


def test_errors_carry_retry_meaning_and_reason_codes():
    with pytest.raises(NoEligibleWorkers) as none:
        pick([worker("x", "other")])
    with pytest.raises(PoolOverloaded) as full:
        pick([worker("w", active=2, max_jobs=2), worker("v", gpu=91)])
    with pytest.raises(NoPoolMapping) as unmapped:
        pick([], job("job.nowhere"))

    assert isinstance(none.value, NoWorkers) and none.value.retryable
    assert "no workers available" in str(none.value) and none.value.pools == ("default",)
    assert isinstance(full.value, RetryAfter) and full.value.retryable
    assert full.value.candidates == 2 and "overloaded" in str(full.value)
    assert not isinstance(unmapped.value, RetryAfter) and unmapped.value.topic == "job.nowhere"

    # The DLQ reason code the request path records for a failed pick.
    assert [e.value.reason_code for e in (none, full, unmapped)] == \
        ["no_workers", "pool_overloaded", "no_pool_mapping"]
