"""The workflow engine's own cost per step: Redis round trips and CPU of
``WorkflowRunner.apply``, on the real Redis and NATS (and the safety kernel, in its
own process so its CPU is not counted), wired as ``tests/workflow_harness.py`` wires it.

Budgets (ours):

- Redis round trips per workflow step <= 4: per event, the run lock taken by the script
  that reads the run (and the ended job's state and result), and the save, which also
  releases the lock when the event's outbox is one step job (else an unlock that also
  clears the outbox carried out follows); a step costs about one event.
- Workflow engine CPU per step <= 5 ms: ``runner.apply`` of a step job's end, one
  process, real Redis and NATS on loopback.

A linear workflow of N worker steps (``job.echo``, each step's input an expression
over the previous step's output) runs through the harness: the start event and each
job-ended event are applied by the real runner; the scheduler's request and result
paths and the worker are held while an event is applied and run after it, so
neither their round trips (``bench_roundtrips`` counts those) nor their CPU fall in
an apply. A transform-only workflow of N steps (every step completes inside its
start event) shows the engine's cost without dispatch.

Round trips are counted on the runner's own Redis connections (a pipeline, a MULTI
or a script call is one), over the start event and each job-ended event, divided by
N; the floor is the least a step can cost, one read and one write of its run (a GET
of the run and a SET of a copy, sent through the same counting connection after
each job-ended event). CPU is process time around ``runner.apply`` of the job-ended
events, divided by N, in runs without counting; its floor is the same work with no
logic, as the control plane's floor is (bench_control_plane): per job-ended event, a
GET of the run, ``json.loads`` + ``json.dumps`` of it, a SET of the copy, and one step
job's request built and published (core NATS, flushed), on the runner's own clients.
``json.loads`` + ``json.dumps`` alone (this figure's floor until the round trips and
the publish were counted in it) is printed beside it. For the transform-only workflow
both floors are one read and one write of the run for its one event (no publish),
divided by N. Figures are medians over runs after one warm-up run. Run:

    python -m tests.bench.bench_workflow [steps] [--runs N]
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import ROOT, cli, emit, env_int, figure, free_port, progress

if TYPE_CHECKING:
    from cordum.bus.workflow_events import RunEvent
    from cordum.workflow.runner import WorkflowRunner

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
TRIPS: list[str] = []
"""What each round trip sent while ``COUNTING`` is on: command and first key."""
COUNTING = [False]
FLOOR_REPS = 20
"""loads+dumps of a run document are timed this many times and averaged."""
IO_FLOOR_REPS = 5
"""The read, write and publish of the CPU floor are timed this many times, averaged."""
FLOOR_SUBJECT = "bench.workflow.floor"
"""Where the floor's publish goes (nobody listens)."""
# What each round trip is for, by its command and first key.
ROLES = (("SET cordum:wf:run:lock:", "lock"), ("EVALSHA cordum:wf:run:lock:", "unlock"),
         ("EVALSHA wf:run:* wf:run:outbox:", "save"),
         ("EVALSHA wf:run:* cordum:wf:delay:timers", "lock+load"),
         ("GET wf:run:job:", "job->run map"), ("HGETALL job:meta:", "job state+result"),
         ("MULTI", "save"), ("DEL wf:run:outbox:", "clear outbox"))
"""Label prefixes; a script's label names its first two keys, ``*`` stands for a run id."""


def trip_label(command: Any) -> str:
    """``NAME first-key`` of the first command in a packed request, ``+k`` for k more."""
    chunks = command if isinstance(command, list | tuple) else [command]
    data = b"".join(bytes(c) for c in chunks)
    names: list[str] = []
    first_key, pos = "", 0
    while data[pos:pos + 1] == b"*":
        end = data.index(b"\r\n", pos)
        argc, pos = int(data[pos + 1:end]), end + 2
        args: list[bytes] = []
        for _ in range(argc):
            end = data.index(b"\r\n", pos)
            size, pos = int(data[pos + 1:end]), end + 2
            if len(args) < 5:
                args.append(data[pos:pos + size])
            pos += size + 2
        names.append(args[0].decode().upper())
        if len(names) == 1 and len(args) > 1:
            # A script's first key follows its sha and key count.
            script = names[0] in ("EVALSHA", "EVAL") and len(args) > 3
            first_key = (args[3] if script else args[1]).decode(errors="replace")
            if script and len(args) > 4:
                first_key += " " + args[4].decode(errors="replace")
    label = f"{names[0]} {first_key}".strip() if names else "?"
    return label + (f" +{len(names) - 1}" if len(names) > 1 else "")


def role(label: str) -> str:
    shape = re.sub(r"(wf:run:(?:outbox:)?)[0-9a-f-]{36}", r"\1*", label)
    return next((name for prefix, name in ROLES if shape.startswith(prefix)),
                re.sub(r"[0-9a-f-]{36}", "<run>", label))


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        if COUNTING[0]:
            TRIPS.append(trip_label(command))
        return await super().send_packed_command(command, check_health)


def definition(kind: str, wf_id: str, steps: int) -> dict[str, Any]:
    """A chain of ``steps`` steps, each one's input built from the one before."""
    out: dict[str, Any] = {}
    for i in range(1, steps + 1):
        prev = "${input.n}" if i == 1 else (
            f"${{steps.s{i - 1}.output.echo.n + 1}}" if kind == "worker"
            else f"${{steps.s{i - 1}.output.n + 1}}")
        step: dict[str, Any] = {"type": kind, "input": {"n": prev, "who": "${input.who}"}}
        if kind == "worker":
            step["topic"] = "job.echo"
        if i > 1:
            step["depends_on"] = [f"s{i - 1}"]
        out[f"s{i}"] = step
    return {"id": wf_id, "name": f"bench {kind}", "steps": out}


@dataclass(frozen=True, slots=True)
class Applied:
    """One applied event: its kind, process CPU, round trips (counted runs) and floors."""

    kind: str
    cpu_ms: float
    trips: tuple[str, ...]
    floor_ms: float
    floor_trips: int
    doc_bytes: int
    json_ms: float


def _held_stack() -> Any:
    """The harness, with the scheduler's and the worker's callbacks held while an event
    is applied (they run between two applies), and a second runner on counted connections."""
    from cordum.workflow.runner import WorkflowRunner
    from cordum.workflow.store import WorkflowStore
    from tests.workflow_harness import WorkflowStack

    class HeldStack(WorkflowStack):
        def __init__(self, kernel_addr: str) -> None:
            super().__init__(kernel_addr, redis_url=REDIS_URL)
            self.held: list[tuple[Any, Any]] = []
            self.counted_redis = aioredis.Redis.from_url(
                REDIS_URL, connection_class=CountingConnection)
            self.counted = WorkflowRunner(WorkflowStore(self.counted_redis), self.counted_redis,
                                          self.publisher, self.queue)
            self.floor_key = f"bench:wf:floor:{self.unique}"
            self.retried = 0

        async def _on_submit(self, msg: Any) -> None:
            self.held.append((super()._on_submit, msg))

        async def _on_result(self, msg: Any) -> None:
            self.held.append((super()._on_result, msg))

        async def _on_job(self, msg: Any) -> None:
            self.held.append((super()._on_job, msg))

        async def drive(self, run_id: str, runner: WorkflowRunner, last: str
                        ) -> list[Applied]:
            """Apply the run's events until it ends; the held callbacks in between."""
            out: list[Applied] = []
            end = time.monotonic() + 60
            while time.monotonic() < end:
                for event in self.queue.take():
                    applied = await self.apply_one(event, runner, last)
                    if applied is not None:
                        out.append(applied)
                while self.held:
                    handle, msg = self.held.pop(0)
                    await handle(msg)
                if (not self.queue.events and not self.held
                        and await self.run_status(run_id) not in ("pending", "running",
                                                                  "waiting", "")):
                    return out
                await asyncio.sleep(0.002)
            raise RuntimeError(f"run {run_id} did not end within 60 s")

        async def apply_one(self, event: RunEvent, runner: WorkflowRunner, last: str
                            ) -> Applied | None:
            from cordum.errors import RetryAfter
            from cordum.workflow import keys

            counted = runner is self.counted
            TRIPS.clear()
            COUNTING[0] = counted
            c0 = time.process_time()
            try:
                await runner.apply(event)
            except RetryAfter:  # lock busy (another writer of the run): not a sample
                self.retried += 1
                self.queue.events.append(event)
                return None
            finally:
                cpu_ms = (time.process_time() - c0) * 1000
                COUNTING[0] = False
            trips = tuple(TRIPS)
            raw = await self.redis.get(keys.run_key(event.run_id))
            json_ms = json_floor_ms(raw)
            floor_ms = 0.0 if counted else await self.io_floor_ms(event.run_id,
                                                                  publish=bool(last))
            floor_trips = 0
            if counted:  # the least a step does: read its run, write it back
                TRIPS.clear()
                COUNTING[0] = True
                doc = await self.counted_redis.get(keys.run_key(event.run_id))
                await self.counted_redis.set(self.floor_key, doc or b"", ex=60)
                COUNTING[0] = False
                floor_trips = len(TRIPS)
            kind = event.kind
            if kind == "job":
                kind = "job_last" if event.job_id.rsplit(":", 1)[1].startswith(f"{last}@") \
                    else "job"
            return Applied(kind, cpu_ms, trips, floor_ms, floor_trips, len(raw or b""),
                           json_ms)

        async def io_floor_ms(self, run_id: str, *, publish: bool) -> float:
            """Mean CPU ms of the least an event of the run does, on the runner's own
            clients: GET its run, ``json.loads`` and ``json.dumps`` it, SET it back (a
            copy), and, with ``publish``, build one step job's request and publish it
            (core NATS, flushed: a reply from the server, as JetStream's ack is)."""
            from cordum import protocol
            from cordum.workflow import keys

            c0 = time.process_time()
            for _ in range(IO_FLOOR_REPS):
                raw = await self.redis.get(keys.run_key(run_id))
                doc = json.dumps(json.loads(raw or b"{}"), separators=(",", ":"))
                await self.redis.set(self.floor_key, doc, ex=60)
                if publish:
                    job_id = f"{run_id}:floor@1"
                    req = protocol.JobRequest(
                        job_id=job_id, topic="job.echo", tenant_id=self.tenant,
                        workflow_id=run_id, memory_id=f"run:{run_id}",
                        context_ptr=protocol.pointer(protocol.context_key(job_id)))
                    await self.publisher.publish(FLOOR_SUBJECT, protocol.packet(
                        trace_id=run_id, sender_id="bench", job_request=req))
            return (time.process_time() - c0) * 1000 / IO_FLOOR_REPS

        async def close(self) -> None:
            await self.redis.delete(self.floor_key)
            await self.counted_redis.aclose()
            await super().close()

    return HeldStack


def json_floor_ms(raw: bytes | str | None) -> float:
    """Mean CPU ms of one ``json.loads`` + ``json.dumps`` of the run document."""
    if raw is None:
        return 0.0
    c0 = time.process_time()
    for _ in range(FLOOR_REPS):
        json.dumps(json.loads(raw), separators=(",", ":"))
    return (time.process_time() - c0) * 1000 / FLOOR_REPS


async def measure(kernel_addr: str, steps: int, runs: int) -> tuple[dict[str, Any], dict]:
    """Per run (after one warm-up): the figures' inputs, and what the runs looked like."""
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.workflows.service import WorkflowService

    s = _held_stack()(kernel_addr)
    await s.start()
    who = Principal(tenant=s.tenant, role="admin", principal_id=f"bench-{s.unique}")
    service = WorkflowService(s.definitions, s.store, s.runner)
    wf_ids = {kind: f"bench-{kind}-{s.unique}" for kind in ("worker", "transform")}
    for kind, wf_id in wf_ids.items():
        await service.save_definition(who, definition(kind, wf_id, steps))
    got: dict[str, list[float]] = {k: [] for k in (
        "trips_step", "trips_floor", "trips_start", "trips_job", "trips_job_last",
        "trips_transform", "trips_transform_floor", "cpu_step", "cpu_floor", "cpu_start",
        "cpu_transform", "cpu_transform_floor", "cpu_json_floor")}
    sequences: dict[str, list[str]] = {}
    events: Counter[str] = Counter()
    doc_bytes = 0
    try:
        for r in range(runs + 1):  # the first run warms scripts, channels and caches
            for runner in (s.counted, s.runner):
                counted = runner is s.counted
                run_id = await service.start_run(who, wf_ids["worker"], {"n": 1, "who": "ada"})
                s.run_ids.add(run_id)
                applied = await s.drive(run_id, runner, f"s{steps}")
                run_id = await service.start_run(who, wf_ids["transform"],
                                                 {"n": 1, "who": "ada"})
                s.run_ids.add(run_id)
                (transform,) = await s.drive(run_id, runner, "")
                if not r:
                    continue
                jobs = [a for a in applied if a.kind in ("job", "job_last")]
                start = next(a for a in applied if a.kind == "start")
                if counted:
                    events.update(a.kind for a in applied)
                    for a in (*applied, transform):
                        key = "transform" if a is transform else a.kind
                        sequences[key] = [role(t) for t in a.trips]
                    got["trips_step"].append(sum(len(a.trips) for a in applied) / steps)
                    got["trips_floor"].append(sum(a.floor_trips for a in jobs) / steps)
                    got["trips_start"].append(len(start.trips))
                    middle = [len(a.trips) for a in jobs if a.kind == "job"]
                    got["trips_job"].append(statistics.mean(middle) if middle else 0)
                    got["trips_job_last"] += [len(a.trips) for a in jobs if a.kind == "job_last"]
                    got["trips_transform"].append(len(transform.trips) / steps)
                    got["trips_transform_floor"].append(transform.floor_trips / steps)
                else:
                    got["cpu_step"].append(sum(a.cpu_ms for a in jobs) / steps)
                    got["cpu_floor"].append(sum(a.floor_ms for a in jobs) / steps)
                    got["cpu_json_floor"].append(sum(a.json_ms for a in jobs) / steps)
                    got["cpu_start"].append(start.cpu_ms)
                    got["cpu_transform"].append(transform.cpu_ms / steps)
                    got["cpu_transform_floor"].append(transform.floor_ms / steps)
                    doc_bytes = max(a.doc_bytes for a in applied)
            if r:
                progress(f"workflow: {r}/{runs} runs")
    finally:
        from cordum import runtime

        for wf_id in wf_ids.values():
            await s.definitions.delete_definition(s.tenant, wf_id)
        await s.close()
        await runtime.aclose()
    left = await keys_left([s.unique, *s.run_ids])
    if left:
        progress(f"workflow: {len(left)} keys left behind, e.g. {left[:3]}")
    info = {"steps": steps, "runs": runs, "events_per_counted_run":
            {k: v / runs for k, v in events.items()}, "round_trips_by_event": sequences,
            "run_doc_bytes_at_end": doc_bytes, "retried_applies": s.retried,
            "keys_left": len(left)}
    return got, info


async def keys_left(marks: list[str]) -> list[str]:
    """Keys whose names carry this bench's tag or one of its run ids (none, when clean)."""
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        return [k.decode() async for k in redis.scan_iter(count=1000)
                if any(m in k.decode(errors="replace") for m in marks)]
    finally:
        await redis.aclose()


def figures(got: dict[str, list[float]], info: dict[str, Any]) -> list[dict[str, Any]]:
    n, seq = info["steps"], info["round_trips_by_event"]

    def note(kind: str) -> str:
        return ", ".join(seq.get(kind, []))

    json_ms = statistics.median(got["cpu_json_floor"])
    json_ratio = statistics.median(got["cpu_step"]) / json_ms if json_ms else 0.0
    return [
        figure("wf_roundtrips_step", f"Redis round trips per workflow step ({n} worker steps; "
               "start + job-ended events)", "round trips", got["trips_step"], budget="<= 4",
               budget_value=4, floor=got["trips_floor"]),
        figure("wf_roundtrips_start", "  start event (first step dispatched), whole event",
               "round trips", got["trips_start"], note=note("start")),
        figure("wf_roundtrips_job", "  job-ended event, next step dispatched", "round trips",
               got["trips_job"], note=note("job")),
        figure("wf_roundtrips_job_last", "  job-ended event of the last step (run ends)",
               "round trips", got["trips_job_last"], note=note("job_last")),
        figure("wf_roundtrips_transform", f"Redis round trips per step, transform-only "
               f"({n} steps in one start event)", "round trips", got["trips_transform"],
               floor=got["trips_transform_floor"], note=note("transform")),
        figure("wf_cpu_step", "workflow handler CPU per step (runner.apply of job-ended "
               "events)", "ms", got["cpu_step"], budget="<= 5 ms", budget_value=5.0,
               floor=got["cpu_floor"], note=(
                   "floor: per job-ended event, GET + json loads/dumps + SET of the run "
                   "and one flushed publish of a job request; json loads+dumps alone "
                   f"{json_ms:.2f} ms (ratio {json_ratio:.2f})")),
        figure("wf_cpu_start", "  start event CPU (first step dispatched), whole event", "ms",
               got["cpu_start"]),
        figure("wf_cpu_transform", f"engine CPU per step, transform-only ({n} steps in one "
               "start event; no dispatch)", "ms", got["cpu_transform"], budget="<= 5 ms",
               budget_value=5.0, floor=got["cpu_transform_floor"]),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("steps", nargs="?", type=int, default=10)
    parser.add_argument("--runs", type=int, default=env_int("BENCH_WORKFLOW_RUNS", 7))
    args = parser.parse_args(argv)
    addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
           "CORDUM_CONFIG_DIR": str(ROOT / "config")}
    kernel = subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    try:
        time.sleep(1.0)
        got, info = asyncio.run(measure(addr, args.steps, args.runs))
    finally:
        kernel.terminate()
        kernel.wait(5)
    print(f"steps per run: {args.steps}; runs measured: {args.runs} (after one warm-up run); "
          f"run document at the end: {info['run_doc_bytes_at_end']:,} bytes; "
          f"events per run: {info['events_per_counted_run']}; "
          f"applies retried (lock busy): {info['retried_applies']}; "
          f"keys left behind: {info['keys_left']}")
    for kind, trips in info["round_trips_by_event"].items():
        print(f"  round trips of a {kind} event: {' -> '.join(trips)}")
    emit(args.json, figures(got, info), info)


if __name__ == "__main__":
    main()
