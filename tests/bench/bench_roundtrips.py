"""Redis round trips for one job, HTTP submit to SUCCEEDED, through the real gateway,
submit and result code paths on the real Redis (and NATS, and the safety kernel).

A round trip is one write of a request to the Redis socket (a pipeline or a
script call is one); the count is taken on the client's connections, split by
function. The floor is the least a job can cost: one pipelined write of its
request and state, one of its result and state; it is sent through the same
counting connection in the same run. Run:

    make bench-roundtrips      (or: python -m tests.bench.bench_roundtrips [jobs] [--policy on|off])

``--policy`` sets OUTPUT_POLICY_ENABLED (the deployed stack has it on).
``--config-docs`` stores a config document for the tenant's org and for the team the
jobs name, so each submit merges them into the effective config it carries
(shared/cordum/gateway/jobs/submit_reads.py): the figure beside the plain one is what
the merge costs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import ROOT, cli, emit, figure, free_port, progress

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
COUNTS: Counter[str] = Counter()
PHASE = ["setup"]
PHASES = ("gateway", "submit", "result")


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        COUNTS[PHASE[0]] += 1
        if os.environ.get("BENCH_TRACE"):
            print(PHASE[0], bytes(command[0] if isinstance(command, list) else command)[:60])
        return await super().send_packed_command(command, check_health)


def gateway_event(body: dict, key: str) -> dict:
    return {"resource": "/{proxy+}", "path": "/api/v1/jobs", "httpMethod": "POST",
            "headers": {"X-API-Key": key, "X-Tenant-ID": "bench"},
            "multiValueHeaders": {}, "queryStringParameters": None,
            "requestContext": {"stage": "bench", "path": "/bench/api/v1/jobs"},
            "body": json.dumps(body), "isBase64Encoded": False}


async def floor_job(redis: aioredis.Redis, job_id: str) -> None:
    """The least a job needs: request+state in one pipelined write, result+state in another."""
    now = datetime.now(UTC).timestamp()
    PHASE[0] = "floor"
    pipe = redis.pipeline(transaction=False)
    pipe.set(f"bench:floor:req:{job_id}", "{}", ex=60)
    pipe.hset(f"bench:floor:meta:{job_id}", mapping={"state": "PENDING", "updated_at": now})
    pipe.expire(f"bench:floor:meta:{job_id}", 60)
    await pipe.execute()
    pipe = redis.pipeline(transaction=False)
    pipe.set(f"bench:floor:res:{job_id}", "{}", ex=60)
    pipe.hset(f"bench:floor:meta:{job_id}", mapping={"state": "SUCCEEDED", "updated_at": now})
    await pipe.execute()
    PHASE[0] = "setup"
    await redis.delete(f"bench:floor:req:{job_id}", f"bench:floor:meta:{job_id}",
                       f"bench:floor:res:{job_id}")


BENCH_TEAM = "bench-team"


def store_config_docs(redis: aioredis.Redis) -> list[str]:
    """An org and a team document for tenant ``bench``: the keys written."""
    from cordum.store import config_docs

    keys = []
    for scope, scope_id in ((config_docs.ORG, ""), (config_docs.TEAM, BENCH_TEAM)):
        key = config_docs.doc_key(scope, "bench", scope_id)
        doc = {"scope": scope, "scope_id": scope_id or "bench", "revision": 1,
               "updated_at": "2026-01-01T00:00:00Z",
               "data": {"region": "eu", "safety": {"denied_topics": ["job.never"]}}}
        runtime_run(redis.set(key, json.dumps(doc), ex=600))
        keys.append(key)
    return keys


def runtime_run(awaitable: Any) -> Any:
    from cordum import runtime

    return runtime.run(awaitable)


def measure(jobs: int, config_docs: bool = False) -> tuple[dict[str, list[int]], list[int]]:
    from google.protobuf import json_format

    from cordum import config, protocol, runtime
    from cordum.bus.streams import ensure_stream
    from cordum.safety.kernel import serve
    from cordum.safety.policy_file import Policy

    kernel_addr = f"127.0.0.1:{free_port()}"
    server = serve(kernel_addr, Policy(ROOT / "config" / "safety.yaml"))
    os.environ.update(SAFETY_KERNEL_ADDR=kernel_addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      CORDUM_API_KEYS=json.dumps([{"key": "bench", "tenant": "bench"}]))
    config.settings.cache_clear()
    runtime._redis = aioredis.Redis.from_url(REDIS_URL, connection_class=CountingConnection)
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))

    from cordum.gateway.app import app
    from cordum.scheduler.service import default_engine

    # Our own snapshot key, so a running stack's registry is left alone.
    key = f"bench:workers:snapshot:{os.getpid()}"
    engine = default_engine(snapshot_key=key)
    worker_id = f"bench-{os.getpid()}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    runtime.run(runtime.redis_client().set(key, json.dumps({
        "captured_at": now, "writer_id": "bench", "pools": {}, "topics": {},
        "workers": [{"worker_id": worker_id, "pool": "default", "active_jobs": 0,
                     "max_parallel_jobs": 100000, "last_heartbeat": now}]}), ex=300))

    per_job: dict[str, list[int]] = {phase: [] for phase in PHASES}
    floors: list[int] = []
    doc_keys = store_config_docs(runtime.redis_client()) if config_docs else []
    job_body: dict[str, Any] = {"topic": "job.echo"}
    if config_docs:
        job_body["team_id"] = BENCH_TEAM
    for i in range(jobs + 1):  # the first job warms scripts and the snapshot copy
        COUNTS.clear()
        PHASE[0] = "gateway"
        resp = app.resolve(gateway_event({**job_body, "prompt": f"bench {i}"}, "bench"), None)
        assert resp["statusCode"] == 200, resp
        job_id = json.loads(resp["body"])["job_id"]
        if config_docs and i == 0:
            PHASE[0] = "setup"
            stored_req = runtime.run(runtime.redis_client().get(f"job:req:{job_id}"))
            assert b"CORDUM_EFFECTIVE_CONFIG" in stored_req, "no effective config carried"
        PHASE[0] = "setup"  # what the bridge carries over NATS and SQS, read back here
        meta = runtime.run(engine.store.get(job_id))
        stored = runtime.run(runtime.redis_client().get(f"job:req:{job_id}"))
        req = json_format.Parse(stored, protocol.JobRequest())
        PHASE[0] = "submit"
        runtime.run(engine.handle_request(protocol.packet(
            trace_id=meta["trace_id"], sender_id="gw", job_request=req).SerializeToString()))
        PHASE[0] = "setup"  # the worker writes its result before it reports
        runtime.run(runtime.redis_client().set(f"res:{job_id}", '{"echo": "bench"}', ex=300))
        PHASE[0] = "result"
        res = protocol.JobResult(job_id=job_id, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                 worker_id=worker_id, result_ptr=f"redis://res:{job_id}")
        outcome = runtime.run(engine.handle_result(protocol.packet(
            trace_id=meta["trace_id"], sender_id=worker_id, job_result=res).SerializeToString()))
        assert outcome.state == "SUCCEEDED", outcome
        runtime.run(floor_job(runtime.redis_client(), job_id))
        if i:
            for phase in PHASES:
                per_job[phase].append(COUNTS[phase])
            floors.append(COUNTS["floor"])
        if i and i % 10 == 0:
            progress(f"round trips: {i}/{jobs} jobs")
    runtime.run(runtime.redis_client().delete(key, *doc_keys))
    server.stop(grace=0)
    return per_job, floors


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=20)
    parser.add_argument("--policy", choices=("on", "off"), default="on",
                        help="OUTPUT_POLICY_ENABLED (default on, as deployed)")
    parser.add_argument("--config-docs", action="store_true",
                        help="an org and a team config document apply to every job")
    args = parser.parse_args(argv)
    os.environ["OUTPUT_POLICY_ENABLED"] = "true" if args.policy == "on" else "false"
    per_job, floors = measure(args.jobs, args.config_docs)
    totals = [sum(t) for t in zip(*per_job.values(), strict=True)]
    tag = f"output policy {args.policy}"
    name = args.policy
    if args.config_docs:
        tag += ", org and team config documents merged"
        name += "_config"
    figures: list[dict[str, Any]] = [
        figure(f"roundtrips_total_{name}", f"Redis round trips per job ({tag})",
               "round trips", totals, budget="<= 10", budget_value=10, floor=floors,
               note="Cordum spends about 74"),
        *(figure(f"roundtrips_{phase}_{name}", f"  {phase} function ({tag})",
                 "round trips", per_job[phase]) for phase in PHASES),
    ]
    print(f"jobs measured: {args.jobs} (after one warm-up job), {tag}")
    emit(args.json, figures, {"jobs": args.jobs, "policy": args.policy})
    # The line the issue asks for, exactly: the median of the per-job totals.
    print(f"Redis round trips per job: {figures[0]['median']:g}")


if __name__ == "__main__":
    main()
