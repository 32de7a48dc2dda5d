"""CPU per job of the whole control plane: one HTTP job through the gateway, the bridge,
the submit function and the result function, in one process, beside its floor.

Per batch of 10 jobs, on the real Redis, a nats-server of the benchmark's own with
JetStream (the shared server's job stream is a work queue its own bridge consumes),
and the safety kernel in a process of its own (its CPU is not ours):

1. gateway: ``cordum.gateway.app`` answers 10 HTTP submits (API Gateway proxy events);
2. bridge: ``JobForwarder.forward`` of the 10 packets pulled from ``sys.job.submit``
   (the Redis claim and settle, the SQS entries, the acks);
3. submit: the 10 SQS records through the submit function's batch handling;
4. (the worker, not timed: it writes its result and publishes it on ``sys.job.result``)
5. bridge: the same for the 10 results;
6. result: the 10 SQS records through the result function's batch handling.

The bridge's SQS call cannot run without LocalStack: its sink is the real
``SqsQueueSink`` over a client that encodes the SendMessageBatch request (the JSON body)
and answers every entry as accepted, so the bridge counts its encode work, not the
HTTP exchange nor its SigV4 signature. Each phase is timed with ``time.process_time``
(every thread of the process); the figure is their sum per job.

The floor is the same round trips, publishes and encodings with no logic, measured in
the same run: per phase as many pipelined Redis writes as the real phase made round
trips (counted on the same connections); the same durable publishes (to a stream of
the benchmark's own, pulled and acked by the bridge's floor), the same worker
publishes; the JSON decode of the HTTP body and the encode of the answer, the
protobuf encode and protojson of the request, the base64 and JSON of the SQS entries,
the decode of each record's packet. Run:

    python -m tests.bench.bench_control_plane [batches]
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import ROOT, cli, emit, env_int, figure, free_port, progress
from tests.bench.lambda_cost import cost_table, print_cost
from tests.bench.profile import jetstream_nats

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
BATCH = 10
PHASES = ("gateway", "bridge", "submit", "result")
PHASE = ["setup"]
TRIPS: Counter[str] = Counter()
PUBS: Counter[str] = Counter()
FLOOR_STREAM, FLOOR_SUBJECTS = "BENCH_CP_FLOOR", ("bench.cp.floor.submit", "bench.cp.floor.result")


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        TRIPS[PHASE[0]] += 1
        return await super().send_packed_command(command, check_health)


def count_publishes() -> None:
    """Every NATS publish (core, JetStream's request, acks, pulls) counted per phase."""
    from nats.aio.client import Client

    original = Client.publish

    async def publish(self: Any, *args: Any, **kwargs: Any) -> None:
        PUBS[PHASE[0]] += 1
        await original(self, *args, **kwargs)

    Client.publish = publish  # type: ignore[method-assign]


class EncodeOnlySqs:
    """Stands in for ``SqsClient``: encodes the request as the client does and accepts
    every entry; the entries are kept to become the functions' SQS records."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        json.dumps(params, separators=(",", ":")).encode()
        self.sent += params["Entries"]
        return {"Successful": [{"Id": e["Id"]} for e in params["Entries"]]}

    def take_event(self) -> dict[str, Any]:
        entries, self.sent = self.sent, []
        return {"Records": [sqs_record(e["MessageBody"], {
            k: {"stringValue": v["StringValue"], "dataType": "String"}
            for k, v in e["MessageAttributes"].items()}, i) for i, e in enumerate(entries)]}


def sqs_record(body: str, attributes: dict[str, Any], i: int) -> dict[str, Any]:
    return {"messageId": f"m{i}-{time.time_ns()}", "receiptHandle": "rh", "body": body,
            "attributes": {}, "messageAttributes": attributes, "md5OfBody": "",
            "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:0:bench",
            "awsRegion": "us-east-1"}


class Plane:
    """The four parts wired as deployed, on one event loop, and their floors."""

    def __init__(self) -> None:
        from nats.js.api import RetentionPolicy, StreamConfig

        from cordum import protocol, runtime
        from cordum.bus.forward_policy import CONSUMER_RESULT, CONSUMER_SUBMIT, Route
        from cordum.bus.forwarder import JobForwarder
        from cordum.bus.guard import BusGuard, GuardKeys
        from cordum.bus.sqs import SqsQueueSink
        from cordum.bus.streams import ensure_stream
        from cordum.gateway.app import app
        from tests.bench.bench_handler_cpu import Bench

        self.p, self.rt, self.app = protocol, runtime, app
        self.cpu = Bench()
        self.redis = runtime.redis_client()
        self.js = runtime.run(runtime.jetstream())
        self.nc = runtime.run(runtime.nats_client())
        self.stream = runtime.run(ensure_stream(self.js))
        runtime.run(self.js.add_stream(StreamConfig(
            name=FLOOR_STREAM, subjects=list(FLOOR_SUBJECTS),
            retention=RetentionPolicy.WORK_QUEUE)))
        self.sqs = EncodeOnlySqs()
        sink = SqsQueueSink("http://sqs.bench/000000000000/bench", client=self.sqs)  # type: ignore[arg-type]
        self.routes = {"submit": Route(CONSUMER_SUBMIT, protocol.SUBJECT_SUBMIT, sink, "submit"),
                       "result": Route(CONSUMER_RESULT, protocol.SUBJECT_RESULT, sink, "result")}
        self.guard_prefix = f"bench:cp:{os.getpid()}:"
        self.fwd = JobForwarder(self.js, self.stream, list(self.routes.values()),
                                guard=BusGuard(self.redis, keys=GuardKeys(self.guard_prefix)))
        runtime.run(self.fwd.start())
        self.subs = {k: runtime.run(self.js.pull_subscribe_bind(durable=r.durable,
                                                                stream=self.stream))
                     for k, r in self.routes.items()}
        self.floor_subs = {k: runtime.run(self.js.pull_subscribe(
            s, durable=f"bench-cp-{k}", stream=FLOOR_STREAM))
            for k, s in zip(("submit", "result"), FLOOR_SUBJECTS, strict=True)}
        self.jobs: list[str] = []

    def pull(self, sub: Any) -> list[Any]:
        msgs: list[Any] = []
        while len(msgs) < BATCH:
            msgs += self.rt.run(sub.fetch(BATCH - len(msgs), timeout=5))
        return msgs

    # ------------------------------------------------------------ the real path

    def gateway(self, i: int) -> list[str]:
        from tests.bench.bench_roundtrips import gateway_event

        ids = []
        for n in range(BATCH):
            resp = self.app.resolve(gateway_event({"topic": "job.echo",
                                                   "prompt": f"bench {i}.{n}"}, "bench"), None)
            assert resp["statusCode"] == 200, resp
            ids.append(json.loads(resp["body"])["job_id"])
        self.jobs += ids
        return ids

    def forward(self, kind: str) -> None:
        self.rt.run(self.fwd.forward(self.routes[kind], self.pull(self.subs[kind])))

    def submit(self, event: dict[str, Any]) -> None:
        self.cpu.run_batch(event, self.cpu.engine.handle_request)

    def result(self, event: dict[str, Any]) -> None:
        self.cpu.run_batch(event, self.cpu.engine.handle_result)

    def worker(self, ids: list[str], subject: str) -> None:
        """What the worker does (not timed): its result stored, then published durably."""
        p = self.p
        for job_id in ids:
            self.rt.run(self.redis.set(f"res:{job_id}", '{"echo": {}}', ex=600))
            data = p.packet(trace_id=job_id, sender_id=self.cpu.worker, job_result=p.JobResult(
                job_id=job_id, status=p.JobStatus.JOB_STATUS_SUCCEEDED,
                worker_id=self.cpu.worker, result_ptr=f"redis://res:{job_id}")
            ).SerializeToString()
            self.rt.run(self.js.publish(subject, data, headers={"Nats-Msg-Id": f"r-{job_id}"}))

    # ------------------------------------------------------------ the floor

    async def writes(self, n: int, ids: list[str], state: str) -> None:
        for _ in range(n):
            pipe = self.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hset(f"{self.guard_prefix}floor:{job_id}", mapping={"state": state})
            await pipe.execute()

    async def floor_gateway(self, i: int, trips: int) -> list[str]:
        from google.protobuf import json_format

        from tests.bench.bench_roundtrips import gateway_event

        p, ids = self.p, []
        for n in range(BATCH):
            body = json.loads(gateway_event({"topic": "job.echo", "prompt": f"bench {i}.{n}"},
                                            "bench")["body"])
            job_id = f"floor-{i}-{n}-{os.getpid()}"
            req = p.JobRequest(job_id=job_id, topic=body["topic"], tenant_id="bench",
                               context_ptr=f"redis://ctx:{job_id}")
            json_format.MessageToJson(req, indent=None)
            await self.writes(trips, [job_id], "PENDING")
            await self.js.publish(FLOOR_SUBJECTS[0], p.packet(
                trace_id=job_id, sender_id="gw", job_request=req).SerializeToString(),
                headers={"Nats-Msg-Id": job_id})
            json.dumps({"job_id": job_id, "trace_id": job_id})
            ids.append(job_id)
        return ids

    async def floor_bridge(self, kind: str, trips: int) -> dict[str, Any]:
        msgs: list[Any] = []
        while len(msgs) < BATCH:
            msgs += await self.floor_subs[kind].fetch(BATCH - len(msgs), timeout=5)
        entries = [{"Id": str(n), "MessageBody": base64.b64encode(m.data).decode(),
                    "MessageAttributes": {"subject": {"DataType": "String",
                                                      "StringValue": m.subject}}}
                   for n, m in enumerate(msgs)]
        json.dumps({"QueueUrl": "q", "Entries": entries}, separators=(",", ":"))
        await self.writes(trips, [str(m.metadata.sequence.stream) for m in msgs], "sent")
        for m in msgs:
            await m.ack()
        return {"Records": [sqs_record(e["MessageBody"], {}, n) for n, e in enumerate(entries)]}

    async def floor_submit(self, event: dict[str, Any], trips: int) -> list[str]:
        p, ids = self.p, []
        for rec in event["Records"]:
            req = p.decode(base64.b64decode(rec["body"])).packet.job_request
            ids.append(req.job_id)
            await self.nc.publish(p.direct_subject(self.cpu.worker), p.packet(
                trace_id=req.job_id, sender_id="bench", job_request=req).SerializeToString())
            await self.nc.flush()
            await self.writes(trips, [req.job_id], "DISPATCHED")
        return ids

    async def floor_result(self, event: dict[str, Any], trips: int) -> None:
        for rec in event["Records"]:
            res = self.p.decode(base64.b64decode(rec["body"])).packet.job_result
            await self.writes(trips, [res.job_id], "SUCCEEDED")

    # ------------------------------------------------------------ cleanup

    def cleanup(self) -> None:
        """The jobs' keys (as bench_handler_cpu removes its own), the guard's and the floor's."""
        r = self.rt
        self.cpu.ids += self.jobs
        self.cpu.cleanup()
        if self.jobs:
            r.run(self.redis.srem("job:tenant:active:bench", *self.jobs))
            r.run(self.redis.zrem("job:recent", *self.jobs))
        r.run(self.scrub(f"{self.guard_prefix}*"))

    async def scrub(self, pattern: str) -> None:
        async for key in self.redis.scan_iter(pattern, count=1000):
            await self.redis.delete(key)


def timed(phase: str, fn: Callable[[], Any], cpu: dict[str, float], wall: dict[str, float]
          ) -> Any:
    PHASE[0] = phase
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    cpu[phase] = cpu.get(phase, 0.0) + (time.process_time() - c0) * 1000 / BATCH
    wall[phase] = wall.get(phase, 0.0) + (time.perf_counter() - w0) * 1000 / BATCH
    PHASE[0] = "setup"
    return out


def one_batch(pl: Plane, i: int) -> dict[str, dict[str, float]]:
    """One batch through the real path and through the floor: per-job CPU, wall, trips."""
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    TRIPS.clear()  # the worker's and the set-up's, not counted
    PUBS.clear()
    ids = timed("gateway", lambda: pl.gateway(i), cpu, wall)
    timed("bridge", lambda: pl.forward("submit"), cpu, wall)
    timed("submit", lambda: pl.submit(pl.sqs.take_event()), cpu, wall)
    pl.worker(ids, pl.p.SUBJECT_RESULT)
    timed("bridge", lambda: pl.forward("result"), cpu, wall)
    timed("result", lambda: pl.result(pl.sqs.take_event()), cpu, wall)
    trips, pubs = per_job(TRIPS, ""), per_job(PUBS, "")
    run, k = pl.rt.run, {ph: round(trips.get(ph, 0)) for ph in PHASES}
    fids = timed("f_gateway", lambda: run(pl.floor_gateway(i, k["gateway"])), cpu, wall)
    # The bridge's round trips are per pull of 10 (two pulls: requests, results).
    per_pull = round(trips["bridge"] * BATCH / 2)
    ev = timed("f_bridge", lambda: run(pl.floor_bridge("submit", per_pull)), cpu, wall)
    timed("f_submit", lambda: run(pl.floor_submit(ev, k["submit"])), cpu, wall)
    pl.worker(fids, FLOOR_SUBJECTS[1])
    ev = timed("f_bridge", lambda: run(pl.floor_bridge("result", per_pull)), cpu, wall)
    timed("f_result", lambda: run(pl.floor_result(ev, k["result"])), cpu, wall)
    return {"cpu": cpu, "wall": wall, "trips": trips, "pubs": pubs,
            "floor_trips": per_job(TRIPS, "f_"), "floor_pubs": per_job(PUBS, "f_")}


def per_job(counts: Counter[str], prefix: str) -> dict[str, float]:
    """Per job, by phase, of one batch's counts; then cleared for the next."""
    out = {p: counts[prefix + p] / BATCH for p in PHASES}
    counts.clear()
    return out


def measure(batches: int) -> list[dict[str, dict[str, float]]]:
    from cordum import config, runtime

    runtime._redis = aioredis.Redis.from_url(REDIS_URL, connection_class=CountingConnection)
    config.settings.cache_clear()
    count_publishes()
    pl = Plane()
    out = []
    try:
        for i in range(batches + 1):  # the first batch warms scripts, channels and imports
            got = one_batch(pl, i)
            if i:
                out.append(got)
            if i and i % 10 == 0:
                progress(f"control plane: {i}/{batches} batches")
        state = runtime.run(pl.cpu.engine.store.get(pl.jobs[-1]))["state"]
        assert state == "SUCCEEDED", f"the last job ended {state}"
    finally:
        pl.cleanup()
        runtime.run(runtime.aclose())
    return out


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("batches", nargs="?", type=int, default=env_int("BENCH_CP_BATCHES", 30))
    args = parser.parse_args(argv)
    addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
           "CORDUM_CONFIG_DIR": str(ROOT / "config")}
    kernel = subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(SAFETY_KERNEL_ADDR=addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      POWERTOOLS_LOG_LEVEL="WARNING",
                      CORDUM_API_KEYS=json.dumps([{"key": "bench", "tenant": "bench"}]),
                      # The limiter still runs, with room for the whole run.
                      CORDUM_RATE_LIMIT_RPS="100000", CORDUM_RATE_LIMIT_BURST="100000")
    os.environ.setdefault("OUTPUT_POLICY_ENABLED", "true")
    try:
        with jetstream_nats() as nats_url:
            os.environ["NATS_URL"] = nats_url
            time.sleep(0.5)
            runs = measure(args.batches)
    finally:
        kernel.terminate()
        kernel.wait(5)
    total = [sum(r["cpu"][p] for p in PHASES) for r in runs]
    floor = [sum(r["cpu"][f"f_{p}"] for p in PHASES) for r in runs]
    figures = [figure("cp_cpu_job", "control plane CPU per job (gateway + bridge + submit + "
                      "result, HTTP submit to SUCCEEDED)", "ms", total, budget="within 2.5x "
                      "its floor", budget_value=2.5 * statistics.median(floor),
                      floor=floor, note="bridge: encode work only, no SQS exchange")]
    figures += [figure(f"cp_cpu_{p}", f"  {p} CPU per job", "ms", [r["cpu"][p] for r in runs],
                       floor=[r["cpu"][f"f_{p}"] for r in runs]) for p in PHASES]
    wall = {p: statistics.median(r["wall"][p] for r in runs) for p in PHASES}
    cpu = {p: statistics.median(r["cpu"][p] for r in runs) for p in PHASES}
    last = runs[-1]
    print(f"batches measured: {args.batches} of {BATCH} jobs (after one warm-up batch)")
    print(f"  Redis round trips per job, real: {last['trips']}; floor: {last['floor_trips']}")
    print(f"  NATS publishes per job, real: {last['pubs']}; floor: {last['floor_pubs']}")
    print("  wall ms per job (loopback): " + ", ".join(f"{p} {wall[p]:.2f}" for p in PHASES))
    table = cost_table(cpu, wall)
    emit(args.json, figures, {"batches": args.batches, "cpu_ms": cpu, "wall_ms": wall,
                              "trips": last["trips"], "floor_trips": last["floor_trips"],
                              "pubs": last["pubs"], "floor_pubs": last["floor_pubs"],
                              "cost": table})
    print_cost(table)


if __name__ == "__main__":
    main()
