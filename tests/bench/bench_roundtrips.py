"""Redis round trips for one job, HTTP submit to SUCCEEDED, through the real gateway,
submit and result code paths on the real Redis (and NATS, and the safety kernel).

A round trip is one write of a request to the Redis socket (a pipeline or a
script call is one); the count is taken on the client's connections. Run:

    make bench-roundtrips      (or: python -m tests.bench.bench_roundtrips)
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
COUNTS: Counter[str] = Counter()
PHASE = ["setup"]


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[override]
        COUNTS[PHASE[0]] += 1
        if os.environ.get("BENCH_TRACE"):
            print(PHASE[0], bytes(command[0] if isinstance(command, list) else command)[:60])
        return await super().send_packed_command(command, check_health)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_event(body: dict, key: str) -> dict:
    return {"resource": "/{proxy+}", "path": "/api/v1/jobs", "httpMethod": "POST",
            "headers": {"X-API-Key": key, "X-Tenant-ID": "bench"},
            "multiValueHeaders": {}, "queryStringParameters": None,
            "requestContext": {"stage": "bench", "path": "/bench/api/v1/jobs"},
            "body": json.dumps(body), "isBase64Encoded": False}


def main(jobs: int) -> dict[str, float]:
    from cordum import config, protocol, runtime
    from cordum.bus.streams import ensure_stream
    from cordum.safety.kernel import Policy, serve

    kernel_addr = f"127.0.0.1:{free_port()}"
    server = serve(kernel_addr, Policy(ROOT / "config" / "safety.yaml"))
    os.environ.update(SAFETY_KERNEL_ADDR=kernel_addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      CORDUM_API_KEYS=json.dumps([{"key": "bench", "tenant": "bench"}]))
    config.settings.cache_clear()
    runtime._redis = aioredis.Redis.from_url(REDIS_URL, connection_class=CountingConnection)
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))

    from cordum.gateway.app import app
    from cordum.scheduler.registry import SnapshotRegistry
    from cordum.scheduler.service import default_engine

    engine = default_engine()
    # Our own snapshot key, so a running stack's registry is left alone.
    engine._registry = SnapshotRegistry(runtime.redis_client(),
                                        key=f"bench:workers:snapshot:{os.getpid()}")
    worker_id = f"bench-{os.getpid()}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = engine._registry._key  # the snapshot key the registry reads
    runtime.run(runtime.redis_client().set(key, json.dumps({
        "captured_at": now, "writer_id": "bench", "pools": {}, "topics": {},
        "workers": [{"worker_id": worker_id, "pool": "default", "active_jobs": 0,
                     "max_parallel_jobs": 1000, "last_heartbeat": now}]}), ex=120))

    per_job: dict[str, list[int]] = {"gateway": [], "submit": [], "result": []}
    for i in range(jobs + 1):  # the first job warms scripts and the snapshot copy
        COUNTS.clear()
        PHASE[0] = "gateway"
        resp = app.resolve(gateway_event({"topic": "job.echo", "prompt": f"bench {i}"}, "bench"),
                           None)
        job_id = json.loads(resp["body"])["job_id"]
        PHASE[0] = "setup"  # what the bridge carries over NATS and SQS, read back here
        meta = runtime.run(engine.store.get(job_id))
        stored = runtime.run(runtime.redis_client().get(f"job:req:{job_id}"))
        from google.protobuf import json_format

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
        if i:
            for phase in per_job:
                per_job[phase].append(COUNTS[phase])
    server.stop(grace=0)
    return {phase: statistics.median(v) for phase, v in per_job.items()} | {
        "min_total": min(map(sum, zip(*per_job.values(), strict=True))),
        "max_total": max(map(sum, zip(*per_job.values(), strict=True))),
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    # Driven like the Lambda handlers: one loop per process, runtime.run per call.
    figures = main(n)
    total = figures["gateway"] + figures["submit"] + figures["result"]
    print(f"jobs measured: {n} (after one warm-up job)")
    for phase in ("gateway", "submit", "result"):
        print(f"  {phase:8s} median round trips: {figures[phase]:g}")
    print(f"Redis round trips per job: {total:g} (min {figures['min_total']}, "
          f"max {figures['max_total']}; budget <= 10; Cordum about 74)")
