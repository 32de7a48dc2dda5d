"""CPU per job and jobs/s of the submit and result functions on 10-record SQS batches,
real Redis, NATS and safety kernel on loopback, one process (the kernel runs in
its own process so its CPU is not counted). The jobs are stored first as the
gateway stores them, so the submit function does the work it does for an HTTP
job.

Two loads: steady (each batch's jobs are answered before the next batch), and
1,000 jobs in flight (1,000 jobs dispatched and unanswered; every measured
batch submits 10 more and answers the 10 oldest).

The floor is the same batch machinery with handlers that make the same round trips
with no logic, as the control plane's floor is defined: decode the packet; as many
pipelined Redis writes as the real handler made round trips (counted on its
connections in the same batch); as many bare calls of the safety kernel as it made
(submit: ``Check`` of a request naming the job; result: the output service's
``CheckResult`` of the result's text), on a channel of their own; and for submit one
NATS publish of the job to its worker. The kernel call is the policy before dispatch
and the output check that every job needs; a floor without it would be a path that
skips governance. The floor of the writes alone (one pipelined write, and the
publish) is printed beside it, as before. Run:

    make bench-cpu      (or: python -m tests.bench.bench_handler_cpu [batches])
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.bench.common import ROOT, cli, emit, env_int, figure, fmt, free_port, progress

BATCH = 10
TENANT = "bench-cpu"
RESULT = '{"echo": {}}'
PHASE = ["setup"]
TRIPS: Counter[str] = Counter()
"""Redis round trips (packed sends: a pipeline is one) per phase."""
KERNEL_CALLS: Counter[str] = Counter()
"""Calls of the safety kernel (either service) per phase."""


def count_round_trips() -> None:
    """Every Redis send and every kernel call of this process counted under PHASE."""
    from redis.asyncio.connection import Connection

    from cordum.safety import client, output_client

    send = Connection.send_packed_command

    async def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        TRIPS[PHASE[0]] += 1
        await send(self, command, check_health)

    Connection.send_packed_command = counted_send  # type: ignore[method-assign]
    for module in (client, output_client):
        call = module.call_with_one_retry

        async def counted_call(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
            KERNEL_CALLS[PHASE[0]] += 1
            return await _call(*args, **kwargs)

        module.call_with_one_retry = counted_call  # type: ignore[attr-defined]


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
        self.channel: Any = None
        self.calls: tuple[Any, Any] = (None, None)
        self.planned: dict[str, deque[tuple[int, int]]] = {}
        self.trips_made: dict[str, list[float]] = {"submit": [], "result": []}
        self.calls_made: dict[str, list[float]] = {"submit": [], "result": []}

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
            self.runtime.run(self.redis.set(f"res:{i}", RESULT, ex=600))
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

    def plan(self, phase: str) -> None:
        """The round trips and kernel calls the real ``phase`` just made, spread over
        the next floor batch's records (their totals kept exactly)."""
        trips, calls = TRIPS.pop(phase, 0), KERNEL_CALLS.pop(phase, 0)
        self.trips_made[phase].append(trips / BATCH)
        self.calls_made[phase].append(calls / BATCH)
        self.planned[phase] = deque(
            (trips // BATCH + (i < trips % BATCH), calls // BATCH + (i < calls % BATCH))
            for i in range(BATCH))

    async def writes(self, job_id: str, fields: dict[str, str], index: str, add: bool,
                     n: int) -> None:
        for _ in range(n):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(f"job:meta:{job_id}", mapping=fields)
            if add:
                pipe.zadd(index, {job_id: time.time_ns() // 1000})
            else:
                pipe.zrem(index, job_id)
            await pipe.execute()

    def kernel(self) -> tuple[Any, Any]:
        """(the safety kernel's Check, the output service's CheckResult), bare, on a
        channel of their own."""
        if self.channel is None:
            import grpc
            from cordum.agent.v1 import safety_pb2_grpc

            from cordum.safety import output_wire

            self.channel = grpc.aio.insecure_channel(os.environ["SAFETY_KERNEL_ADDR"])
            self.calls = (safety_pb2_grpc.SafetyKernelStub(self.channel).Check,
                          self.channel.unary_unary(output_wire.CHECK_RESULT_METHOD,
                                                   request_serializer=output_wire.encode,
                                                   response_deserializer=output_wire.decode))
        return self.calls

    async def floor_submit(self, data: bytes) -> FloorOutcome:
        """The submit's round trips, kernel calls and publish, no logic."""
        return await self.bare_submit(data, *self.planned["submit"].popleft())

    async def floor_result(self, data: bytes) -> FloorOutcome:
        """The result's round trips and kernel calls, no logic."""
        return await self.bare_result(data, *self.planned["result"].popleft())

    async def writes_submit(self, data: bytes) -> FloorOutcome:
        """The floor of the writes alone: one pipelined write and the publish."""
        return await self.bare_submit(data, 1, 0)

    async def writes_result(self, data: bytes) -> FloorOutcome:
        return await self.bare_result(data, 1, 0)

    async def bare_submit(self, data: bytes, trips: int, calls: int) -> FloorOutcome:
        """A submit with ``trips`` pipelined writes, ``calls`` bare kernel checks and the
        publish to the worker."""
        from cordum.agent.v1 import safety_pb2

        req = self.protocol.decode(data).packet.job_request
        await self.writes(req.job_id, {"state": "DISPATCHED", "worker_id": self.worker},
                          "job:index:dispatched", True, trips)
        for _ in range(calls):
            await self.kernel()[0](safety_pb2.PolicyCheckRequest(
                job_id=req.job_id, topic=req.topic, tenant=req.tenant_id), timeout=5)
        await self.publisher.publish(self.protocol.direct_subject(self.worker),
                                     self.protocol.packet(trace_id=req.job_id,
                                                          sender_id="bench", job_request=req))
        return FloorOutcome(req.job_id)

    async def bare_result(self, data: bytes, trips: int, calls: int) -> FloorOutcome:
        """A result with ``trips`` pipelined writes and ``calls`` bare output checks."""
        res = self.protocol.decode(data).packet.job_result
        await self.writes(res.job_id, {"state": "SUCCEEDED", "result_ptr": res.result_ptr},
                          "job:index:dispatched", False, trips)
        for _ in range(calls):
            await self.kernel()[1]({"job_id": res.job_id, "topic": "job.echo",
                                    "tenant": TENANT, "result_ptr": res.result_ptr,
                                    "content": RESULT}, timeout=5)
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
        if self.channel is not None:
            r.run(self.channel.close())
        self.devnull.close()


def timed(bench: Bench, phase: str, event: dict, handle: Callable[[bytes], Awaitable[Any]]
          ) -> tuple[float, float]:
    """``run_batch`` with the batch's round trips and kernel calls counted under ``phase``."""
    PHASE[0] = phase
    try:
        return bench.run_batch(event, handle)
    finally:
        PHASE[0] = "setup"


KEYS = ("submit", "result", "floor_submit", "floor_result", "writes_submit", "writes_result")


def measure(bench: Bench, batches: int, in_flight: int) -> dict[str, list[float]]:
    """Per batch: CPU ms per job and jobs/s, for submit, result and their floors."""
    out: dict[str, list[float]] = {f"{k}_{m}": [] for k in KEYS for m in ("cpu", "rate")}
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
        got = {"submit": timed(bench, "submit", bench.requests(ids), engine.handle_request)}
        bench.plan("submit")
        waiting.extend(ids)
        answer = [waiting.popleft() for _ in range(BATCH)]
        got["result"] = timed(bench, "result", bench.results(answer), engine.handle_result)
        bench.plan("result")
        for kind, submit, result in (("floor", bench.floor_submit, bench.floor_result),
                                     ("writes", bench.writes_submit, bench.writes_result)):
            floor_ids = [f"bench-{uuid.uuid4()}" for _ in range(BATCH)]
            bench.ids += floor_ids
            got[f"{kind}_submit"] = bench.run_batch(bench.requests(floor_ids), submit)
            got[f"{kind}_result"] = bench.run_batch(bench.results(floor_ids), result)
        if b:
            for key, (cpu, rate) in got.items():
                out[f"{key}_cpu"].append(cpu)
                out[f"{key}_rate"].append(rate)
        if b and b % 10 == 0:
            progress(f"cpu ({in_flight} in flight): {b}/{batches} batches")
    while waiting:  # answer what is left, so no job stays RUNNING (not timed)
        answer = [waiting.popleft() for _ in range(min(BATCH, len(waiting)))]
        bench.run_batch(bench.results(answer), engine.handle_result)
    return out


def writes_note(got: dict[str, list[float]], path: str, made: Bench) -> str:
    """What the floor is made of, and the ratio to the writes alone."""
    real = statistics.median(got[f"{path}_cpu"])
    writes = statistics.median(got[f"writes_{path}_cpu"])
    trips = statistics.median(made.trips_made[path])
    calls = statistics.median(made.calls_made[path])
    return (f"floor per job, as the handler made them: Redis round trips {fmt(trips)}, "
            f"kernel calls {fmt(calls)}{', publishes 1' if path == 'submit' else ''}; the "
            f"writes alone: {fmt(writes)} ms (x{fmt(real / writes if writes else 0.0)})")


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
        count_round_trips()
        bench = Bench()
        try:
            for load, in_flight in (("steady", 0), (f"{args.in_flight} in flight",
                                                    args.in_flight)):
                got = measure(bench, args.batches, in_flight)
                sfx = "" if not in_flight else "_inflight"
                figures += [
                    figure(f"cpu_submit{sfx}", f"submit CPU per job, 10-record batch ({load})",
                           "ms", got["submit_cpu"], budget="<= 2 ms", budget_value=2.0,
                           floor=got["floor_submit_cpu"],
                           note=writes_note(got, "submit", bench)),
                    figure(f"rate_submit{sfx}", f"submit jobs/s, one process ({load})",
                           "jobs/s", got["submit_rate"], floor=got["floor_submit_rate"]),
                    figure(f"cpu_result{sfx}", f"result CPU per job, 10-record batch ({load})",
                           "ms", got["result_cpu"], floor=got["floor_result_cpu"],
                           note=writes_note(got, "result", bench)),
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
    for fig in figures:
        if fig["note"]:
            print(f"  {fig['id']}: {fig['note']}")


if __name__ == "__main__":
    main()
