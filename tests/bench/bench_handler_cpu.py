"""CPU per job and jobs/s of the submit and result functions on 10-record SQS batches,
real Redis, NATS and safety kernel on loopback, one process (the kernel runs in
its own process so its CPU is not counted). The jobs are stored first as the
gateway stores them, so the submit function does the work it does for an HTTP
job.

Two loads: steady (each batch's jobs are answered before the next batch), and
1,000 jobs in flight (1,000 jobs dispatched and unanswered; every measured
batch submits 10 more and answers the 10 oldest). The floor is the same batch
machinery with handlers that do the least a job needs: decode the packet, one
pipelined Redis write of the state (and, for submit, one NATS publish). Run:

    make bench-cpu      (or: python -m tests.bench.bench_handler_cpu [batches])
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.bench.common import ROOT, cli, emit, env_int, figure, free_port, progress

BATCH = 10
TENANT = "bench-cpu"


@dataclass(frozen=True, slots=True)
class FloorOutcome:
    job_id: str
    action: str = "floor"
    state: str = ""
    detail: str = ""


def record(data: bytes, i: int) -> dict:
    return {"messageId": f"m{i}-{uuid.uuid4().hex[:6]}", "receiptHandle": "rh",
            "body": base64.b64encode(data).decode(), "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:bench", "awsRegion": "us-east-1"}


class Bench:
    """The engine wired as the functions wire it, plus what drives it."""

    def __init__(self) -> None:
        from cordum import protocol, runtime
        from cordum.bus.publisher import NatsPublisher
        from cordum.config import settings
        from cordum.lambdas.sqs_batch import VisibilityDelayer
        from cordum.scheduler.batch import process_batch
        from cordum.scheduler.service import default_engine

        self.protocol, self.runtime, self.process_batch = protocol, runtime, process_batch
        # Our own snapshot key, so a running stack's registry is left alone.
        self.snapshot_key = f"bench:workers:snapshot:{os.getpid()}"
        self.engine = default_engine(snapshot_key=self.snapshot_key)
        self.redis = runtime.redis_client()
        self.worker = f"bench-{os.getpid()}"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        runtime.run(self.redis.set(self.snapshot_key, json.dumps({
            "captured_at": now, "writer_id": "bench", "workers": [
                {"worker_id": self.worker, "pool": "default", "active_jobs": 0,
                 "max_parallel_jobs": 1_000_000, "last_heartbeat": now}]}), ex=600))
        self.delayer = VisibilityDelayer(None)
        self.publisher = NatsPublisher(settings())
        # The handlers' EMF lines go where Lambda's stdout would (a pipe), not the terminal.
        self.devnull = open(os.devnull, "w")  # noqa: SIM115
        self.ids: list[str] = []

    # ---------------------------------------------------------------- jobs

    def store(self, n: int) -> list[str]:
        """Jobs stored the way the gateway stores them (not timed)."""
        from google.protobuf import json_format

        from cordum.store.jobs import NewJob

        ids = [f"bench-{uuid.uuid4()}" for _ in range(n)]
        self.ids += ids
        for job_id in ids:
            req = self.protocol.JobRequest(job_id=job_id, topic="job.echo", tenant_id=TENANT,
                                           context_ptr=f"redis://ctx:{job_id}")
            self.runtime.run(self.engine.store.create(NewJob(
                job_id=job_id, trace_id=job_id, tenant=TENANT, topic=req.topic,
                context="{}", request=json_format.MessageToJson(req, indent=None), meta={})))
        return ids

    def requests(self, ids: list[str]) -> dict:
        p = self.protocol
        return {"Records": [record(p.packet(trace_id=i, sender_id="bench", job_request=p.JobRequest(
            job_id=i, topic="job.echo", tenant_id=TENANT, context_ptr=f"redis://ctx:{i}"))
            .SerializeToString(), n) for n, i in enumerate(ids)]}

    def results(self, ids: list[str]) -> dict:
        p = self.protocol
        for i in ids:  # the worker writes its result before it reports (not timed)
            self.runtime.run(self.redis.set(f"res:{i}", '{"echo": {}}', ex=600))
        return {"Records": [record(p.packet(trace_id=i, sender_id=self.worker,
                                            job_result=p.JobResult(
            job_id=i, status=p.JobStatus.JOB_STATUS_SUCCEEDED, worker_id=self.worker,
            result_ptr=f"redis://res:{i}")).SerializeToString(), n) for n, i in enumerate(ids)]}

    def run_batch(self, event: dict, handle: Callable[[bytes], Awaitable[Any]]
                  ) -> tuple[float, float]:
        """(CPU ms per job, jobs/s) of one batch through the functions' batch handling."""
        c0, w0 = time.process_time(), time.perf_counter()
        with contextlib.redirect_stdout(self.devnull):
            out = self.process_batch(event, handle, self.delayer)
        c1, w1 = time.process_time(), time.perf_counter()
        assert not out["batchItemFailures"], out
        n = len(event["Records"])
        return (c1 - c0) * 1000 / n, n / (w1 - w0)

    # ---------------------------------------------------------------- floor handlers

    async def floor_submit(self, data: bytes) -> FloorOutcome:
        req = self.protocol.decode(data).packet.job_request
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(f"job:meta:{req.job_id}", mapping={"state": "DISPATCHED",
                                                     "worker_id": self.worker})
        pipe.zadd("job:index:dispatched", {req.job_id: time.time_ns() // 1000})
        await pipe.execute()
        await self.publisher.publish(self.protocol.direct_subject(self.worker),
                                     self.protocol.packet(trace_id=req.job_id,
                                                          sender_id="bench", job_request=req))
        return FloorOutcome(req.job_id)

    async def floor_result(self, data: bytes) -> FloorOutcome:
        res = self.protocol.decode(data).packet.job_result
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(f"job:meta:{res.job_id}", mapping={"state": "SUCCEEDED",
                                                     "result_ptr": res.result_ptr})
        pipe.zrem("job:index:dispatched", res.job_id)
        await pipe.execute()
        return FloorOutcome(res.job_id)

    # ---------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        r, ids = self.runtime, self.ids
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            pipe = self.redis.pipeline(transaction=False)
            for i in chunk:
                pipe.delete(f"job:meta:{i}", f"job:req:{i}", f"job:events:{i}", f"ctx:{i}",
                            f"res:{i}", f"trace:{i}")
            for state in ("pending", "scheduled", "dispatched", "running", "succeeded"):
                pipe.zrem(f"job:index:{state}", *chunk)
            pipe.zrem("job:recent", *chunk)
            pipe.srem(f"job:tenant:active:{TENANT}", *chunk)
            r.run(pipe.execute())
        r.run(self.redis.delete(self.snapshot_key))
        self.devnull.close()


def measure(bench: Bench, batches: int, in_flight: int) -> dict[str, list[float]]:
    """Per batch: CPU ms per job and jobs/s, for submit, result and their floors."""
    out: dict[str, list[float]] = {k: [] for k in (
        "submit_cpu", "submit_rate", "result_cpu", "result_rate",
        "floor_submit_cpu", "floor_submit_rate", "floor_result_cpu", "floor_result_rate")}
    engine = bench.engine
    waiting: deque[str] = deque()
    if in_flight:
        progress(f"putting {in_flight} jobs in flight")
        for _ in range(in_flight // BATCH):
            ids = bench.store(BATCH)
            bench.run_batch(bench.requests(ids), engine.handle_request)
            waiting.extend(ids)
    for b in range(batches + 1):  # the first batch warms scripts, channels and imports
        ids = bench.store(BATCH)
        s_cpu, s_rate = bench.run_batch(bench.requests(ids), engine.handle_request)
        waiting.extend(ids)
        answer = [waiting.popleft() for _ in range(BATCH)]
        r_cpu, r_rate = bench.run_batch(bench.results(answer), engine.handle_result)
        floor_ids = [f"bench-{uuid.uuid4()}" for _ in range(BATCH)]
        bench.ids += floor_ids
        f_cpu, f_rate = bench.run_batch(bench.requests(floor_ids), bench.floor_submit)
        fr_cpu, fr_rate = bench.run_batch(bench.results(floor_ids), bench.floor_result)
        if b:
            for key, value in (("submit_cpu", s_cpu), ("submit_rate", s_rate),
                               ("result_cpu", r_cpu), ("result_rate", r_rate),
                               ("floor_submit_cpu", f_cpu), ("floor_submit_rate", f_rate),
                               ("floor_result_cpu", fr_cpu), ("floor_result_rate", fr_rate)):
                out[key].append(value)
        if b and b % 10 == 0:
            progress(f"cpu ({in_flight} in flight): {b}/{batches} batches")
    while waiting:  # answer what is left, so no job stays RUNNING (not timed)
        answer = [waiting.popleft() for _ in range(min(BATCH, len(waiting)))]
        bench.run_batch(bench.results(answer), engine.handle_result)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("batches", nargs="?", type=int, default=20)
    parser.add_argument("--in-flight", type=int,
                        default=env_int("BENCH_CPU_IN_FLIGHT", 1000))
    args = parser.parse_args(argv)
    addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
           "CORDUM_CONFIG_DIR": str(ROOT / "config")}
    kernel = subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(SAFETY_KERNEL_ADDR=addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      POWERTOOLS_LOG_LEVEL="WARNING")
    os.environ.setdefault("OUTPUT_POLICY_ENABLED", "true")
    figures: list[dict[str, Any]] = []
    try:
        time.sleep(1.0)
        bench = Bench()
        try:
            for load, in_flight in (("steady", 0), (f"{args.in_flight} in flight",
                                                    args.in_flight)):
                got = measure(bench, args.batches, in_flight)
                sfx = "" if not in_flight else "_inflight"
                figures += [
                    figure(f"cpu_submit{sfx}", f"submit CPU per job, 10-record batch ({load})",
                           "ms", got["submit_cpu"], budget="<= 2 ms", budget_value=2.0,
                           floor=got["floor_submit_cpu"]),
                    figure(f"rate_submit{sfx}", f"submit jobs/s, one process ({load})",
                           "jobs/s", got["submit_rate"], floor=got["floor_submit_rate"]),
                    figure(f"cpu_result{sfx}", f"result CPU per job, 10-record batch ({load})",
                           "ms", got["result_cpu"], floor=got["floor_result_cpu"]),
                    figure(f"rate_result{sfx}", f"result jobs/s, one process ({load})",
                           "jobs/s", got["result_rate"], floor=got["floor_result_rate"]),
                ]
        finally:
            bench.cleanup()
    finally:
        kernel.terminate()
        kernel.wait(5)
    emit(args.json, figures, {"batches": args.batches, "in_flight": args.in_flight,
                              "output_policy": os.environ["OUTPUT_POLICY_ENABLED"]})


if __name__ == "__main__":
    main()
