"""Audited governance acts: what a job cancel and a gated submit cost with their audit
event (``cordum.store.audit_trail``) appended by the act's own script, beside the same
act without it, and what carrying the audit library costs a job script that appends
nothing.

On a redis-server of the benchmark's own, each variant runs ``acts`` acts, one after
another, in blocks of 50 that take turns with the other variants' blocks (a slower
stretch of the machine falls on every variant alike); ``--runs`` runs after a warm-up
run, the figures being the medians of the per-run means:

- **job cancel**: ``JobStore.transition(job, [CANCELLED], only_from=OPEN_STATES)`` of a
  PENDING job (created beforehand, not timed) with ``audit=None``, with the
  ``job.cancel`` event (``AuditTrail.script_parts``, the event built and encoded in the
  timed loop, as the gateway does per cancel) and with the event signed by a 32-byte
  HMAC key;
- **gated submit**: ``JobStore.create`` of a job in APPROVAL_REQUIRED, likewise with and
  without its ``job.submit.gated`` event;
- **unaudited scripts**: the same unaudited cancel and create run by ``transition.lua``
  and ``create_job.lua`` registered alone (``0`` for the audit count), as they were
  before the audit existed: what the library chunk (``audit_chain.lua``, put before
  every script that may append) costs each run of the script that does not use it.

Per variant: the client's wall time per act (one EVALSHA over loopback), the time Redis
spends per call (INFO commandstats, ``cmdstat_evalsha`` usec_per_call, after CONFIG
RESETSTAT) and the round trips per act (writes to the socket, counted on the client's
connection). Run:

    python -m tests.bench.bench_audited_act [acts] [--runs N] [--json PATH]
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import ROOT, cli, emit, figure, private_redis, progress

TENANT = "bench-audit"
ACTOR, KEY_ID = "user:alice@example.com", "key-0123456789"
HMAC_KEY = bytes(range(32))
LUA = ROOT / "shared" / "cordum" / "store" / "lua"
COUNTS: Counter[str] = Counter()
PHASE = ["setup"]
LIBRARY_NOTE_US = 2.0
"""What the library chunk may cost a script that does not use it before it is worth
building its tables and closures lazily, on the first append."""

ACTS = ("cancel", "gated")
BLOCK = 50
"""Acts of one variant in a row before the next variant's turn."""
VARIANTS = {
    "plain": "script without the audit library",
    "none": "without event",
    "event": "with event",
    "hmac": "with event + HMAC",
}


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        COUNTS[PHASE[0]] += 1
        return await super().send_packed_command(command, check_health)


def stores(redis: aioredis.Redis) -> tuple[Any, Any]:
    """(the job store as shipped, the same store running its create and transition
    scripts registered alone, without the audit library)."""
    from cordum.store.jobs import JobStore

    class PlainScripts(JobStore):
        def __init__(self, client: aioredis.Redis) -> None:
            super().__init__(client, retention_s=3600)
            self._create = client.register_script((LUA / "create_job.lua").read_text())
            self._transition = client.register_script((LUA / "transition.lua").read_text())

    return JobStore(redis, retention_s=3600), PlainScripts(redis)


def new_job(job_id: str, state: Any) -> Any:
    from cordum.store.jobs import NewJob

    request = json.dumps({"jobId": job_id, "topic": "job.default", "tenantId": TENANT,
                          "labels": {"team": "bench"}})
    return NewJob(job_id=job_id, trace_id=job_id, tenant=TENANT, topic="job.default",
                  context='{"input":"bench"}', request=request,
                  meta={"principal": ACTOR, "labels": '{"team":"bench"}'}, state=state)


async def server_usec(redis: aioredis.Redis) -> tuple[float, int]:
    """(evalsha's total µs, its calls) since the last CONFIG RESETSTAT."""
    stats = await redis.info("commandstats")
    entry = stats.get("cmdstat_evalsha") or {}
    return float(entry.get("usec", 0.0)), int(entry.get("calls", 0))


Act = Callable[[Any], Awaitable[None]]


def cancel_act(store: Any, trail: Any, variant: str) -> Act:
    """One cancel of a PENDING job, as the gateway makes it."""
    from cordum.store.audit_trail import governance
    from cordum.store.jobs import OPEN_STATES, JobState

    fields = {"failure_reason": "cancelled via api"}

    async def act(job_id: str) -> None:
        audit = None
        if variant in ("event", "hmac"):
            audit = trail.script_parts(governance(
                "job.cancel", TENANT, ACTOR, KEY_ID, job_id=job_id, reason="cancelled via api",
                extra={"topic": "job.default", "state_before": "PENDING"}))
        result = await store.transition(job_id, [JobState.CANCELLED], only_from=OPEN_STATES,
                                        fields=fields, audit=audit)
        assert result.applied, (job_id, result)

    return act


def gated_act(store: Any, trail: Any, variant: str) -> Act:
    """One submit the policy sends for approval: the job stored in APPROVAL_REQUIRED."""
    from cordum.store.audit_trail import governance

    async def act(job: Any) -> None:
        audit = None
        if variant in ("event", "hmac"):
            audit = trail.script_parts(governance(
                "job.submit.gated", TENANT, ACTOR, KEY_ID, job_id=job.job_id,
                reason="approval required for job.default", snapshot="sha256:" + "5" * 64,
                extra={"topic": job.topic, "rule_id": "bench-approve"}))
        assert await store.create(job, audit=audit), job.job_id

    return act


async def interleaved(redis: aioredis.Redis, acts: dict[str, Act],
                      items: dict[str, list[Any]]) -> dict[str, tuple[float, float, float, int]]:
    """Each variant's items in blocks of :data:`BLOCK`, the variants' blocks taking turns
    (a slower stretch of the machine falls on all of them alike): per variant (client µs
    per act, Redis µs per call, round trips per act, EVALSHA calls)."""
    names = list(acts)
    total = {v: [0.0, 0.0, 0, 0] for v in names}
    count = len(next(iter(items.values())))
    for block, first in enumerate(range(0, count, BLOCK)):
        turn = block % len(names)
        for variant in names[turn:] + names[:turn]:
            chunk = items[variant][first:first + BLOCK]
            await redis.config_resetstat()
            COUNTS.clear()
            PHASE[0] = "act"
            t0 = time.perf_counter()
            for item in chunk:
                await acts[variant](item)
            wall = time.perf_counter() - t0
            PHASE[0] = "setup"
            usec, calls = await server_usec(redis)
            got = total[variant]
            got[0] += wall
            got[1] += usec
            got[2] += COUNTS["act"]
            got[3] += calls
    return {v: (t[0] * 1e6 / count, t[1] / max(int(t[3]), 1), t[2] / count, int(t[3]))
            for v, t in total.items()}


def build_events(acts: int, trail: Any) -> float:
    """Client µs per event of building and encoding ``acts`` job.cancel events alone."""
    from cordum.store.audit_trail import governance

    t0 = time.perf_counter()
    for i in range(acts):
        trail.script_parts(governance(
            "job.cancel", TENANT, ACTOR, KEY_ID, job_id=f"job-{i:05d}",
            reason="cancelled via api", extra={"topic": "job.default", "state_before": "PENDING"}))
    return (time.perf_counter() - t0) * 1e6 / acts


async def measure(url: str, acts: int, runs: int) -> dict[str, Any]:
    from cordum.store.audit import with_audit
    from cordum.store.audit_trail import AuditTrail
    from cordum.store.jobs import JobState

    redis = aioredis.Redis.from_url(url, connection_class=CountingConnection)
    shipped, plain = stores(redis)
    trails = {"event": AuditTrail(redis), "hmac": AuditTrail(redis, HMAC_KEY)}
    out: dict[str, Any] = {act: {v: {"us": [], "redis": [], "rt": []} for v in VARIANTS}
                           for act in ACTS}
    # The chunk alone: a script that returns at once, with and without the chunk before.
    bare = redis.register_script("return 0")
    chunked = redis.register_script(with_audit("return 0"))
    out["chunk"] = {"bare": [], "chunked": []}
    out["build_us"] = []
    try:
        for run in range(runs + 1):  # the first run loads the scripts and warms up
            for act, make in (("cancel", cancel_act), ("gated", gated_act)):
                calls: dict[str, Act] = {}
                items: dict[str, list[Any]] = {}
                for variant in VARIANTS:
                    store = plain if variant == "plain" else shipped
                    calls[variant] = make(store, trails.get(variant, trails["event"]), variant)
                    tag = f"{act}-{variant}-{run}"
                    if act == "cancel":
                        items[variant] = [f"{tag}-{i:05d}" for i in range(acts)]
                        for job_id in items[variant]:  # not timed
                            await shipped.create(new_job(job_id, JobState.PENDING))
                    else:
                        items[variant] = [new_job(f"{tag}-{i:05d}", JobState.APPROVAL_REQUIRED)
                                          for i in range(acts)]
                result = await interleaved(redis, calls, items)
                for variant, (wall, usec, rt, n) in result.items():
                    if run:
                        # Past the warm-up every script is loaded: one EVALSHA an act.
                        assert n == acts, (act, variant, n, acts)
                        got = out[act][variant]
                        got["us"].append(wall)
                        got["redis"].append(usec)
                        got["rt"].append(rt)
                progress(f"run {run}{' (warm-up)' if not run else ''} {act}: " + ", ".join(
                    f"{v} {r[0]:.1f} µs / {r[1]:.1f} µs in Redis" for v, r in result.items()))

            async def call(script: Any) -> None:
                await script(keys=[], args=[])

            bodies: dict[str, Act] = {"bare": call, "chunked": call}
            scripts = {"bare": [bare] * acts, "chunked": [chunked] * acts}
            for name, (_, usec, _, _) in (await interleaved(redis, bodies, scripts)).items():
                if run:
                    out["chunk"][name].append(usec)
            build = build_events(acts, trails["hmac"])
            if run:
                out["build_us"].append(build)
        head = (await AuditTrail(redis).chain.head(TENANT)) or (0, "")
        out["chain_entries"] = head[0]
        out["used_memory_mb"] = (await redis.info("memory"))["used_memory"] / 1e6
    finally:
        await redis.aclose()
    return out


def differences(a: list[float], b: list[float]) -> list[float]:
    """a - b per run."""
    return [x - y for x, y in zip(a, b, strict=True)]


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("acts", nargs="?", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with private_redis() as url:
        out = asyncio.run(measure(url, args.acts, args.runs))
    figures: list[dict[str, Any]] = []
    lines: list[str] = []
    for act, title in (("cancel", "job cancel"), ("gated", "gated submit")):
        data = out[act]
        none = data["none"]
        for variant in ("none", "event", "hmac"):
            got = data[variant]
            base = None if variant == "none" else none
            figures.append(figure(f"audit_{act}_{variant}_us",
                                  f"{title}, {VARIANTS[variant]} (client)", "µs/act",
                                  got["us"], floor=base["us"] if base else None))
            figures.append(figure(f"audit_{act}_{variant}_redis",
                                  f"{title}, {VARIANTS[variant]} (Redis)", "µs/call",
                                  got["redis"], floor=base["redis"] if base else None))
        rts = {v: sorted(set(data[v]["rt"])) for v in data}
        figures.append(figure(f"audit_{act}_rt", f"{title}, round trips per act with event "
                              "+ HMAC", "round trips", data["hmac"]["rt"], floor=none["rt"],
                              note="per variant: " + ", ".join(
                                  f"{VARIANTS[v]} {'/'.join(f'{r:g}' for r in rts[v])}"
                                  for v in ("plain", "none", "event", "hmac"))))
        for variant in ("event", "hmac"):
            for side, unit in (("us", "µs/act"), ("redis", "µs/call")):
                figures.append(figure(
                    f"audit_{act}_{variant}_cost_{side}",
                    f"{title}: the event's cost, {VARIANTS[variant]} "
                    f"({'client' if side == 'us' else 'Redis'})", unit,
                    differences(data[variant][side], none[side])))
        # The library chunk in a script that appends nothing (every job, not only acts).
        plain = data["plain"]
        figures.append(figure(f"audit_{act}_plain_us", f"{title}, unaudited, "
                              f"{VARIANTS['plain']} (client)", "µs/act", plain["us"]))
        figures.append(figure(f"audit_{act}_plain_redis", f"{title}, unaudited, "
                              f"{VARIANTS['plain']} (Redis)", "µs/call", plain["redis"]))
        library = figure(f"audit_{act}_library_redis",
                         f"{title}, unaudited: what carrying the audit library costs (Redis)",
                         "µs/call", differences(none["redis"], plain["redis"]))
        figures.append(library)
        if library["median"] > LIBRARY_NOTE_US:
            lines.append(f"{title}: the audit library costs an unaudited script "
                         f"{library['median']:.1f} µs per call in Redis (over "
                         f"{LIBRARY_NOTE_US:g} µs): the chunk builds its tables and "
                         "closures on every run of the script")
    chunk = figure("audit_chunk_redis", "the library chunk alone: `return 0` with it minus "
                   "without (Redis)", "µs/call",
                   differences(out["chunk"]["chunked"], out["chunk"]["bare"]))
    figures.append(chunk)
    figures.append(figure("audit_event_build_us", "building one job.cancel event's script "
                          "arguments (governance + encode + SHA-256, client)", "µs/event",
                          out["build_us"]))
    if chunk["median"] > LIBRARY_NOTE_US:
        lines.append(f"the library chunk alone costs {chunk['median']:.1f} µs per script run "
                     f"in Redis (over {LIBRARY_NOTE_US:g} µs)")
    print(f"acts: {args.acts:,} per variant, {args.runs} runs after a warm-up; "
          f"{out['chain_entries']:,} entries in the chain")
    for act, title in (("cancel", "job cancel"), ("gated", "gated submit")):
        med = {v: {s: sorted(out[act][v][s])[len(out[act][v][s]) // 2] for s in ("us", "redis")}
               for v in out[act]}
        print(f"{title}: client µs/act " + " | ".join(
            f"{VARIANTS[v]} {med[v]['us']:.1f}" for v in ("plain", "none", "event", "hmac"))
            + f"; the event's cost {med['event']['us'] - med['none']['us']:+.1f}, "
              f"with HMAC {med['hmac']['us'] - med['none']['us']:+.1f}")
        print(f"{title}: Redis µs/call " + " | ".join(
            f"{VARIANTS[v]} {med[v]['redis']:.1f}" for v in ("plain", "none", "event", "hmac"))
            + f"; the event's cost {med['event']['redis'] - med['none']['redis']:+.1f}, "
              f"with HMAC {med['hmac']['redis'] - med['none']['redis']:+.1f}")
    for line in lines:
        print(f"NOTE {line}")
    emit(args.json, figures, {"acts": args.acts, "runs": args.runs, "block": BLOCK,
                              "hmac_key_bytes": len(HMAC_KEY), "tenant": TENANT,
                              "chain_entries": out["chain_entries"],
                              "used_memory_mb": round(out["used_memory_mb"], 1),
                              "library_note_us": LIBRARY_NOTE_US,
                              "round_trips": {act: {v: out[act][v]["rt"] for v in out[act]}
                                              for act in ("cancel", "gated")}})


if __name__ == "__main__":
    main()
