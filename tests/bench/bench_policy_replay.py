"""Policy replay over 10,000 jobs of one tenant: wall time and Redis round trips of
the replay (``cordum.gateway.policy.replay``) following its cursors in calls of
``max_jobs`` 1000, beside a floor.

The jobs are stored with the job store's own scripts (create, then a transition to
SUCCEEDED with the safety fields), each with its request, in a redis-server of the
benchmark's own. A round trip is one write of a request to the Redis socket (a
pipeline is one), counted on the client's connection. The floor is the least the
same answer can cost: the job ids known beforehand (not timed), the same pipelined
reads (``HMGET`` of the meta, ``GET`` of the request, 200 jobs a round trip) and
``SafetyPolicy.evaluate`` on an input built from the request's JSON, nothing else.
Run:

    python -m tests.bench.bench_policy_replay [jobs] [--runs N]
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import ROOT, cli, emit, figure, private_redis, progress

TENANT = "bench-replay"
COUNTS: Counter[str] = Counter()
PHASE = ["setup"]
CANDIDATE = """\
rules:
  - id: bench-deny-b
    match: {topics: [job.bench.b]}
    decision: deny
"""
"""Denies the topic of one job in ten: the changes stay under the page's limit."""
TOPICS = ("job.default",) * 9 + ("job.bench.b",)
MAX_JOBS = 1000
FLOOR_BATCH = 200


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        COUNTS[PHASE[0]] += 1
        return await super().send_packed_command(command, check_health)


async def seed(redis: aioredis.Redis, jobs: int) -> list[str]:
    """``jobs`` SUCCEEDED jobs of :data:`TENANT`, newest first."""
    from cordum.store.jobs import JobState, JobStore, NewJob

    store = JobStore(redis, retention_s=3600)
    ids: list[str] = []
    for i in range(jobs):
        job_id, topic = f"bench-{i:06d}", TOPICS[i % len(TOPICS)]
        request = json.dumps({"jobId": job_id, "topic": topic,
                              "labels": {"team": "bench", "n": str(i)}})
        await store.create(NewJob(job_id=job_id, trace_id=job_id, tenant=TENANT, topic=topic,
                                  context="{}", request=request, meta={"principal": "b"}))
        await store.transition(job_id, [JobState.SUCCEEDED], fields={
            "safety_decision": "ALLOW", "safety_rule_id": "default-topic-allow"})
        ids.append(job_id)
        if (i + 1) % 2000 == 0:
            progress(f"stored {i + 1:,}/{jobs:,} jobs")
    return ids[::-1]


def build_policy() -> Any:
    from cordum.safety.bundles import Bundle, effective_policy
    from cordum.safety.policy_file import POLICY_FILE_NAME

    path = ROOT / "config" / POLICY_FILE_NAME
    return effective_policy(path.read_bytes(), str(path),
                            {"bench/candidate": Bundle("bench/candidate", CANDIDATE)})


async def replay_all(redis: aioredis.Redis, policy: Any) -> tuple[int, int, int]:
    """(calls, jobs evaluated, changes) of a replay of the whole window."""
    from cordum.gateway.policy.models import ReplayRequest
    from cordum.gateway.policy.replay import PolicyReplay

    now = time.time()
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    base = {"from": time.strftime(fmt, time.gmtime(now - 3600)),
            "to": time.strftime(fmt, time.gmtime(now + 3600)),
            "candidate_content": CANDIDATE, "max_jobs": MAX_JOBS, "limit": 1000}
    cursor, calls, evaluated, changes = "", 0, 0, 0
    while True:
        body = ReplayRequest.model_validate({**base, "cursor": cursor})
        answer = await PolicyReplay(redis, policy, TENANT).run(body)
        calls += 1
        evaluated += answer["summary"]["evaluated"]
        changes += len(answer["changes"])
        if answer["next_cursor"] is None:
            return calls, evaluated, changes
        cursor = answer["next_cursor"]


async def floor(redis: aioredis.Redis, policy: Any, ids: list[str]) -> tuple[int, int]:
    """(jobs evaluated, changes): the same reads and evaluations, nothing else."""
    from cordum.safety.matching import PolicyInput
    from cordum.store.jobs import meta_key, request_key

    evaluated = changes = 0
    for start in range(0, len(ids), FLOOR_BATCH):
        pipe = redis.pipeline(transaction=False)
        for job_id in ids[start:start + FLOOR_BATCH]:
            pipe.hmget(meta_key(job_id), "tenant", "topic", "safety_decision")
            pipe.get(request_key(job_id))
        replies = await pipe.execute()
        for meta, raw in zip(replies[::2], replies[1::2], strict=True):
            req = json.loads(raw)
            decision = policy.evaluate(PolicyInput(
                topic=req["topic"], tenant=TENANT, job_id=req["jobId"],
                labels=req.get("labels") or {}), dry_run=True)
            evaluated += 1
            changes += decision.decision.value.upper() != (meta[2] or b"ALLOW").decode()
    return evaluated, changes


async def measure(url: str, jobs: int, runs: int) -> dict[str, Any]:
    redis = aioredis.Redis.from_url(url, connection_class=CountingConnection)
    try:
        t0 = time.perf_counter()
        ids = await seed(redis, jobs)
        progress(f"seeded {jobs:,} jobs in {time.perf_counter() - t0:.1f} s")
        policy = build_policy()
        out: dict[str, Any] = {"ms": [], "rt": [], "floor_ms": [], "floor_rt": []}
        for run in range(runs + 1):  # the first run of each warms imports and caches
            COUNTS.clear()
            PHASE[0] = "replay"
            t0 = time.perf_counter()
            calls, evaluated, changes = await replay_all(redis, policy)
            ms = (time.perf_counter() - t0) * 1000
            PHASE[0] = "floor"
            t0 = time.perf_counter()
            f_evaluated, f_changes = await floor(redis, policy, ids)
            f_ms = (time.perf_counter() - t0) * 1000
            PHASE[0] = "setup"
            assert (evaluated, changes) == (f_evaluated, f_changes) == (jobs, jobs // 10), (
                evaluated, changes, f_evaluated, f_changes)
            if run:
                out["ms"].append(ms)
                out["rt"].append(COUNTS["replay"])
                out["floor_ms"].append(f_ms)
                out["floor_rt"].append(COUNTS["floor"])
                out["calls"] = calls
            progress(f"run {run}{' (warm-up)' if not run else ''}: replay {ms:.0f} ms, "
                     f"{COUNTS['replay']} round trips, {calls} calls; floor {f_ms:.0f} ms, "
                     f"{COUNTS['floor']} round trips")
        return out
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with private_redis() as url:
        out = asyncio.run(measure(url, args.jobs, args.runs))
    per_job_us = [ms * 1000 / args.jobs for ms in out["ms"]]
    floor_us = [ms * 1000 / args.jobs for ms in out["floor_ms"]]
    figures = [
        figure("replay_total_ms", f"Replay of {args.jobs:,} jobs (calls of max_jobs "
               f"{MAX_JOBS}, following cursors)", "ms", out["ms"], floor=out["floor_ms"]),
        figure("replay_per_job_us", "  per job", "µs", per_job_us, floor=floor_us),
        figure("replay_roundtrips", f"  Redis round trips for {args.jobs:,} jobs", "round trips",
               out["rt"], floor=out["floor_rt"],
               note=f"{out['calls']} calls; per call one for the first index ranges, then "
                    "one per batch of 200 (its metas + requests and the next ranges)"),
    ]
    print(f"jobs: {args.jobs:,} of one tenant, {args.runs} runs after a warm-up")
    emit(args.json, figures, {"jobs": args.jobs, "runs": args.runs, "calls": out["calls"],
                              "max_jobs": MAX_JOBS, "batch": FLOOR_BATCH})


if __name__ == "__main__":
    main()
