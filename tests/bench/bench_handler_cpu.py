"""CPU per job of the submit and result functions on 10-record SQS batches, real
Redis, NATS and safety kernel on loopback, one process (the kernel runs in its
own process so its CPU is not counted). The jobs are stored first as the
gateway stores them, so the submit function does the work it does for an HTTP
job. Run:

    make bench-cpu      (or: python -m tests.bench.bench_handler_cpu [batches])
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(data: bytes, i: int) -> dict:
    return {"messageId": f"m{i}-{uuid.uuid4().hex[:6]}", "receiptHandle": "rh",
            "body": base64.b64encode(data).decode(), "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:bench", "awsRegion": "us-east-1"}


def main(batches: int) -> None:
    addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
           "CORDUM_CONFIG_DIR": str(ROOT / "config")}
    kernel = subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(SAFETY_KERNEL_ADDR=addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      POWERTOOLS_LOG_LEVEL="WARNING")
    try:
        time.sleep(1.0)
        from google.protobuf import json_format

        from cordum import protocol, runtime
        from cordum.scheduler.batch import VisibilityDelayer, process_batch
        from cordum.scheduler.registry import SnapshotRegistry
        from cordum.scheduler.service import default_engine
        from cordum.store.jobs import NewJob

        engine = default_engine()
        # Our own snapshot key, so a running stack's registry is left alone.
        engine._registry = SnapshotRegistry(runtime.redis_client(),
                                            key=f"bench:workers:snapshot:{os.getpid()}")
        worker = f"bench-{os.getpid()}"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        runtime.run(runtime.redis_client().set(engine._registry._key, json.dumps({
            "captured_at": now, "writer_id": "bench", "workers": [
                {"worker_id": worker, "pool": "default", "active_jobs": 0,
                 "max_parallel_jobs": 100000, "last_heartbeat": now}]}), ex=300))
        delayer = VisibilityDelayer(None)
        # The handlers' EMF lines go where Lambda's stdout would (a pipe), not the terminal.
        devnull = open(os.devnull, "w")  # noqa: SIM115
        submit_ms, result_ms = [], []
        for b in range(batches + 1):
            ids = [f"bench-{uuid.uuid4()}" for _ in range(10)]
            jobs = [protocol.JobRequest(job_id=i, topic="job.echo", tenant_id="bench")
                    for i in ids]
            # Stored the way the gateway stores them (not timed): the submit function
            # then sees what it sees for an HTTP job.
            for req in jobs:
                runtime.run(engine.store.create(NewJob(
                    job_id=req.job_id, trace_id=req.job_id, tenant="bench", topic=req.topic,
                    context="{}", request=json_format.MessageToJson(req, indent=None), meta={})))
            reqs = [protocol.packet(trace_id=r.job_id, sender_id="bench",
                                    job_request=r).SerializeToString() for r in jobs]
            event = {"Records": [record(d, n) for n, d in enumerate(reqs)]}
            t0 = time.process_time()
            with contextlib.redirect_stdout(devnull):
                out = process_batch(event, engine.handle_request, delayer)
            t1 = time.process_time()
            assert not out["batchItemFailures"], out
            results = [protocol.packet(trace_id=i, sender_id=worker, job_result=protocol.JobResult(
                job_id=i, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED, worker_id=worker,
                result_ptr=f"redis://res:{i}")).SerializeToString() for i in ids]
            t2 = time.process_time()
            with contextlib.redirect_stdout(devnull):
                out = process_batch({"Records": [record(d, n) for n, d in enumerate(results)]},
                                    engine.handle_result, delayer)
            t3 = time.process_time()
            assert not out["batchItemFailures"], out
            if b:  # the first batch warms scripts, channels and imports
                submit_ms.append((t1 - t0) * 1000 / 10)
                result_ms.append((t3 - t2) * 1000 / 10)
        for name, xs in (("submit", submit_ms), ("result", result_ms)):
            print(f"{name} CPU per job (10-record batch): median {statistics.median(xs):.2f} ms "
                  f"(min {min(xs):.2f}, max {max(xs):.2f}) over {len(xs)} batches")
        print("budget: submit <= 2 ms per job")
    finally:
        kernel.terminate()
        kernel.wait(5)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
