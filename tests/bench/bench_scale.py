"""Scale: a reconciler tick over a million stored jobs, routing over 10 to 10,000
workers, and the worker snapshot's write and hydrate at 10,000 workers.

Everything runs against a private ``redis-server`` started for this run (no
persistence, a temp dir, stopped after): the shared Redis never holds the
million jobs. Jobs are written server-side by a Lua loop, the way the job store
lays them out (``job:meta:<id>`` hash, ``job:index:<state>`` score in µs,
``job:deadline``). Fresh jobs sit in the states the reconciler scans
(SCHEDULED, DISPATCHED, RUNNING), a quarter of them with a deadline ahead: the
worst case for a scan. The reconciler's clock is pinned to the fill time, so a
fresh job stays fresh however long the run takes.

A tick is measured by wall time, round trips (requests written to the socket)
and Redis commands (``INFO commandstats`` before and after, the commands run
inside scripts included). Its floor, in the same run, is the least a tick can
do: the same index pages read, then one plain HSET per stale job. Run:

    python -m tests.bench.bench_scale
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.bench.common import (
    ROOT,
    cli,
    emit,
    env_int,
    figure,
    private_redis,
    progress,
)

SENT: Counter[str] = Counter()
SCANNED = ("SCHEDULED", "DISPATCHED", "RUNNING")
HOUR_US = 3_600_000_000

FILL_LUA = """
-- ARGV[1] id prefix  ARGV[2] first number  ARGV[3] count  ARGV[4] score (us)
-- ARGV[5] deadline (us) given to every 4th job, 0 for none
local prefix, first, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ts, deadline = ARGV[4], tonumber(ARGV[5])
local states = {'SCHEDULED', 'DISPATCHED', 'RUNNING'}
for n = first, first + count - 1 do
  local id = prefix .. n
  local state = states[(n % 3) + 1]
  redis.call('HSET', 'job:meta:' .. id, 'state', state, 'updated_at', ts, 'created_at', ts,
             'tenant', 'bench', 'topic', 'job.echo', 'trace_id', id, 'attempts', '1')
  redis.call('ZADD', 'job:index:' .. string.lower(state), ts, id)
  if deadline > 0 and n % 4 == 0 then
    redis.call('HSET', 'job:meta:' .. id, 'deadline_unix', deadline)
    redis.call('ZADD', 'job:deadline', deadline, id)
  end
end
return count
"""


class CountingConnection(Connection):
    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        SENT["n"] += 1
        return await super().send_packed_command(command, check_health)


async def commands_run(redis: aioredis.Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


class Jobs:
    """The private Redis and what was stored in it."""

    def __init__(self, url: str, now_us: int) -> None:
        self.redis = aioredis.Redis.from_url(url, connection_class=CountingConnection)
        self.plain = aioredis.Redis.from_url(url)
        self.now_us = now_us
        self.stored = 0
        self._fill = self.plain.register_script(FILL_LUA)
        self._stale_round = 0

    async def fill_to(self, total: int) -> None:
        chunk = 20_000
        while self.stored < total:
            n = min(chunk, total - self.stored)
            await self._fill(args=["fresh-", self.stored, n, self.now_us,
                                   self.now_us + HOUR_US])
            self.stored += n
            if self.stored % 200_000 == 0 or self.stored == total:
                progress(f"scale: {self.stored:,} fresh jobs stored")

    async def add_stale(self, n: int) -> None:
        """``n`` jobs last moved an hour before the tick's clock: past every timeout."""
        self._stale_round += 1
        await self._fill(args=[f"stale{self._stale_round}-", 0, n, self.now_us - HOUR_US, 0])

    async def close(self) -> None:
        await self.redis.aclose()
        await self.plain.aclose()


async def tick_once(jobs: Jobs, stale: int) -> dict[str, float]:
    from cordum.scheduler.reconciler import Reconciler
    from cordum.store.indexes import JobIndexes
    from cordum.store.jobs import JobStore

    await jobs.add_stale(stale)
    reconciler = Reconciler(JobStore(jobs.redis), JobIndexes(jobs.redis),
                            clock_us=lambda: jobs.now_us)
    before = await commands_run(jobs.plain)
    SENT.clear()
    t0 = time.perf_counter()
    report = await reconciler.tick()
    elapsed = (time.perf_counter() - t0) * 1000
    sent = SENT["n"]
    commands = await commands_run(jobs.plain) - before - 1  # less the first INFO
    assert report.total_timed_out == stale, report.as_dict()
    return {"ms": elapsed, "round_trips": sent, "commands": commands}


async def floor_tick(jobs: Jobs, stale: int) -> dict[str, float]:
    """The same index pages, then one plain write per stale job."""
    from cordum.scheduler.reconciler import ReconcilerPolicy

    await jobs.add_stale(stale)
    policy = ReconcilerPolicy()
    before = await commands_run(jobs.plain)
    SENT.clear()
    t0 = time.perf_counter()
    done = 0
    for state, timeout_s in zip(SCANNED, (policy.scheduled_timeout_s,
                                          policy.dispatch_timeout_s,
                                          policy.running_timeout_s), strict=True):
        cutoff = jobs.now_us - int(timeout_s * 1_000_000)
        while True:
            ids = await jobs.redis.zrangebyscore(f"job:index:{state.lower()}", "-inf", cutoff,
                                                 start=0, num=policy.batch_size)
            if not ids:
                break
            for job_id in ids:
                pipe = jobs.redis.pipeline(transaction=False)
                pipe.hset(f"job:meta:{job_id.decode()}", "state", "TIMEOUT")
                pipe.zrem(f"job:index:{state.lower()}", job_id)
                await pipe.execute()
                done += 1
    await jobs.redis.zrangebyscore("job:deadline", "-inf", jobs.now_us, start=0,
                                   num=policy.batch_size)
    elapsed = (time.perf_counter() - t0) * 1000
    sent = SENT["n"]
    commands = await commands_run(jobs.plain) - before - 1
    assert done == stale, done
    return {"ms": elapsed, "round_trips": sent, "commands": commands}


async def reconciler_series(url: str, runs: int, top: int, stale: int
                            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs = Jobs(url, time.time_ns() // 1000)
    figures: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    points = [(top // 100, stale), (top // 10, stale), (top, stale), (top, stale // 10),
              (top, stale * 10)]
    try:
        for total, n_stale in points:
            await jobs.fill_to(total - n_stale)
            got = [await tick_once(jobs, n_stale) for _ in range(runs)]
            floor = [await floor_tick(jobs, n_stale) for _ in range(runs)]
            info = await jobs.plain.info("memory")
            progress(f"reconciler: {total:,} stored, {n_stale:,} stale: "
                     f"{sorted(g['ms'] for g in got)[len(got) // 2]:.0f} ms")
            row = {"stored": total, "stale": n_stale}
            for key in ("ms", "round_trips", "commands"):
                row[key] = [g[key] for g in got]
                row[f"floor_{key}"] = [f[key] for f in floor]
            row["used_memory_mb"] = int(info["used_memory"]) / 1e6
            series.append(row)
            if (total, n_stale) == (top, stale):
                figures += [
                    figure("reconciler_tick_ms",
                           f"reconciler tick, {total:,} jobs stored, {n_stale:,} stale", "ms",
                           row["ms"], budget="<= 2 s, O(stale)", budget_value=2000.0,
                           floor=row["floor_ms"]),
                    figure("reconciler_tick_commands", "  Redis commands in that tick",
                           "commands", row["commands"], floor=row["floor_commands"]),
                    figure("reconciler_tick_round_trips", "  round trips in that tick",
                           "round trips", row["round_trips"], floor=row["floor_round_trips"]),
                ]
    finally:
        await jobs.close()
    return figures, series


# ------------------------------------------------------------------ workers


def heartbeats(n: int, seed: int = 7) -> list[Any]:
    from cordum.protocol import Heartbeat

    rnd = random.Random(seed)
    return [Heartbeat(worker_id=f"w-{i:05d}", pool="default", active_jobs=rnd.randrange(0, 12),
                      max_parallel_jobs=1_000, cpu_load=float(rnd.randrange(0, 80)),
                      capabilities=["job.echo"], labels={"zone": f"z{i % 3}"})
            for i in range(n)]


def snapshot_document(n: int) -> dict[str, Any]:
    from cordum.config import load_pools
    from cordum.registry.live import LiveRegistry
    from cordum.registry.pools import topic_pools

    registry = LiveRegistry()
    for hb in heartbeats(n):
        registry.record(hb)
    return registry.snapshot(topic_pools(load_pools(ROOT / "config")), writer_id="bench")


class StaticSource:
    """A snapshot source that returns one stored document (routing runs without I/O)."""

    def __init__(self, raw: str) -> None:
        self._raw = raw

    async def get(self, name: str) -> str:
        return self._raw


async def routing(n: int, runs: int, picks: int) -> tuple[list[float], list[float]]:
    """Per run: mean µs per job of pick + record_dispatch, and of a full scan of the workers."""
    from cordum.config import load_pools
    from cordum.protocol import JobRequest
    from cordum.registry.reader import SnapshotReader
    from cordum.scheduler.strategy import LeastLoadedStrategy

    raw = json.dumps(snapshot_document(n))
    strategy = LeastLoadedStrategy(load_pools(ROOT / "config"))
    req = JobRequest(job_id="j", topic="job.echo")
    indexed, scanned = [], []
    for _ in range(runs):
        registry = SnapshotReader(StaticSource(raw))
        await registry.workers(refresh=True)
        t0 = time.perf_counter()
        for _ in range(picks):
            worker = strategy.pick_worker(req, await registry.workers())
            registry.record_dispatch(worker.worker_id)
        indexed.append((time.perf_counter() - t0) * 1e6 / picks)
        plain = list(await registry.workers())
        t0 = time.perf_counter()
        for _ in range(picks):
            strategy.pick_worker(req, plain)
        scanned.append((time.perf_counter() - t0) * 1e6 / picks)
    return indexed, scanned


async def snapshot_io(url: str, n: int, runs: int) -> dict[str, list[float]]:
    from cordum.config import load_pools
    from cordum.registry.live import LiveRegistry
    from cordum.registry.pools import topic_pools
    from cordum.registry.reader import SnapshotReader
    from cordum.registry.writer import SnapshotWriter

    redis = aioredis.Redis.from_url(url)
    bridge_registry = LiveRegistry()
    for hb in heartbeats(n):
        bridge_registry.record(hb)
    topics = topic_pools(load_pools(ROOT / "config"))
    writer = SnapshotWriter(redis, key="bench:snapshot", lock_key="bench:snapshot:lock")
    out: dict[str, list[float]] = {k: [] for k in (
        "build", "write", "write_floor", "hydrate_bridge", "hydrate_scheduler", "read_floor",
        "bytes")}
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            document = bridge_registry.snapshot(topics, writer_id="bench")
            t1 = time.perf_counter()
            assert await writer.write(document)
            t2 = time.perf_counter()
            body = json.dumps(document, separators=(",", ":"))
            t3 = time.perf_counter()
            await redis.set("bench:snapshot:floor", body, ex=600)
            t4 = time.perf_counter()
            out["build"].append((t1 - t0) * 1000)
            out["write"].append((t2 - t0) * 1000)
            out["write_floor"].append((t4 - t3) * 1000)
            out["bytes"].append(len(body))

            t0 = time.perf_counter()
            fresh = LiveRegistry()
            taken = fresh.hydrate(await writer.read() or {})
            t1 = time.perf_counter()
            scheduler = SnapshotReader(redis, key="bench:snapshot")
            live = await scheduler.workers(refresh=True)
            t2 = time.perf_counter()
            json.loads(await redis.get("bench:snapshot:floor"))
            t3 = time.perf_counter()
            assert taken == n and len(live) == n, (taken, len(live))
            out["hydrate_bridge"].append((t1 - t0) * 1000)
            out["hydrate_scheduler"].append((t2 - t1) * 1000)
            out["read_floor"].append((t3 - t2) * 1000)
    finally:
        await redis.aclose()
    return out


async def run(args: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # Each tick logs its report; a few hundred of them would bury the progress lines.
    logging.getLogger("cordum.scheduler.reconciler").setLevel(logging.ERROR)
    figures: list[dict[str, Any]] = []
    info: dict[str, Any] = {"runs": args.runs, "stored": args.jobs, "stale": args.stale}
    with private_redis() as url:
        recon, series = await reconciler_series(url, args.runs, args.jobs, args.stale)
        figures += recon
        info["reconciler_series"] = series
        routing_rows = []
        for n in (10, 1_000, 10_000):
            indexed, scanned = await routing(n, args.runs, 200)
            routing_rows.append({"workers": n, "indexed_ms": indexed, "scan_ms": scanned})
            progress(f"routing over {n:,} workers: {sorted(indexed)[len(indexed) // 2]:.1f} µs")
            figures.append(figure(
                f"routing_{n}", f"routing one job over {n:,} workers (pick + record dispatch)",
                "µs", indexed, **({"budget": "<= 5 ms", "budget_value": 5000.0} if n == 10_000
                                  else {})))
            figures.append(figure(f"routing_scan_{n}",
                                  f"  the same pick by a scan of every worker ({n:,})", "µs",
                                  scanned, note="reference: the unindexed scan"))
        info["routing"] = routing_rows
        io = await snapshot_io(url, 10_000, args.runs)
        info["snapshot_bytes"] = io["bytes"][0]
        progress("snapshot write and hydrate at 10,000 workers measured")
        figures += [
            figure("snapshot_write", "snapshot write at 10,000 workers (build + lock + SET)",
                   "ms", io["write"], floor=io["write_floor"],
                   note="floor: SET of the same body"),
            figure("snapshot_build", "  of which building the document", "ms", io["build"]),
            figure("hydrate_bridge", "snapshot hydrate at 10,000 workers (bridge registry)",
                   "ms", io["hydrate_bridge"], floor=io["read_floor"],
                   note="floor: GET + json.loads of the same body"),
            figure("hydrate_scheduler",
                   "snapshot hydrate at 10,000 workers (scheduler registry, indexed)", "ms",
                   io["hydrate_scheduler"], floor=io["read_floor"]),
        ]
    return figures, info


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=env_int("BENCH_SCALE_JOBS", 1_000_000))
    parser.add_argument("--stale", type=int, default=env_int("BENCH_SCALE_STALE", 1_000))
    parser.add_argument("--runs", type=int, default=env_int("BENCH_SCALE_RUNS", 5))
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    figures, info = asyncio.run(run(args))
    info["seconds"] = (datetime.now(UTC) - started).total_seconds()
    emit(args.json, figures, info)


if __name__ == "__main__":
    main()
