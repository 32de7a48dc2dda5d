"""The live event stream (cordum-stream) with 1,000 connected clients: the time from a
bus packet's publish to its frame at each client, the events per second one service
process delivers to them all, and the memory each connection costs it.

The service runs as it is deployed, ``python -m cordum.stream`` in a process of its own
on a free port, on the machine's Redis (a database of the benchmark's own,
``tests/redis_db.py``, emptied after) and a nats-server of its own (``private_nats``:
on the shared one the job stream would store every ``sys.job.submit`` packet and a
local stack's bridge forward it to its submit function; BENCH_STREAM_NATS_URL names a
server to use instead, and the packets are taken out of its job stream after), with a
key list in CORDUM_API_KEYS and a queue group and subject prefix of this run's own, so
no other stream service takes its events. The clients (``stream_clients``) are another
process: WebSockets that offer permessage-deflate as browsers do (``--no-deflate``: not),
``--sse N`` of them Server-Sent Events instead, all of one tenant, 20 per key (the
service's per-key bound, as shipped).

Each event is a ``job.submit`` BusPacket as the gateway builds it for an API submit, of
a job whose meta is stored (so the writer reads its tenant, logs it and sends it to the
tenant's clients), published on ``sys.job.submit`` with its publish time in its
``traceId`` (``time.time_ns()``: one host, one realtime clock for every process).

Figures and their floors:

- latency, p50 and p99 over every (client, event) pair, events at
  ``--latency-rate``/s; floor: a bare NATS subscriber in the clients' process receiving
  the same publish;
- events (and frames) per second: ``--runs`` runs of ``--events`` events, each published
  once at most ``--window`` events are not yet at every client; with the service's CPU
  over each run (one process, one core: near 100 % it is the bottleneck), the clients'
  and the machine's beside it;
- memory per connection: the service's RSS (VmRSS) with every client connected and idle
  less its RSS with none (after one warm-up stream), divided by the clients; also after
  the events (write buffers, compressors).

The floors of the last two: the same clients and events against a bare aiohttp server
(``stream_floor``) that writes one protojson text per event to every connection from
its NATS callback. Run:

    python -m tests.bench.bench_stream [--clients N] [--events N] [--runs N]
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.bench.common import (
    ROOT,
    cli,
    emit,
    env_float,
    env_int,
    figure,
    fmt,
    free_port,
    percentile,
    private_nats,
    progress,
)
from tests.bench.stream_clients import raise_nofile

SERVER_REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
SHARED_NATS_VAR = "BENCH_STREAM_NATS_URL"
"""A NATS server to run on instead of a private one (the packets are taken out of its
job stream after; a local stack's bridge on it may forward some first)."""
TOPIC = "job.bench-stream"
"""No worker serves it: should a local stack's submit path see a packet (a shared NATS),
no job of it ever runs."""
SLICES = 5
FLOOR_LATENCY_EVENTS = 50
"""The bare server's latency is a side note: fewer events than the service's."""
HEALTH_WAIT_S = 30.0
CLIENTS_TIMEOUT_S = 600.0
STORE_BATCH = 50
"""Jobs stored at once (within the Redis client's connection pool)."""


def slices_of(values: list[float], n: int) -> list[list[float]]:
    """``values`` (in arrival order) cut into ``n`` consecutive parts."""
    size = max(1, len(values) // n)
    return [values[i:i + size] for i in range(0, size * n, size) if values[i:i + size]]


def nofile_raiser(wanted: int) -> Any:
    """A child's RLIMIT_NOFILE raised before it runs (each client is a socket on both
    sides)."""
    return functools.partial(raise_nofile, wanted)


def wait_healthy(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        time.sleep(0.2)
    raise SystemExit(f"the server did not answer /health within {HEALTH_WAIT_S:g} s:\n"
                     f"{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Run:
    """This run's tenant, keys, jobs and Redis database."""

    def __init__(self, args: Any) -> None:
        from cordum.stream.settings import DEFAULT_MAX_CONNECTIONS_PER_KEY

        self.args = args
        self.tag = uuid.uuid4().hex[:8]
        self.tenant = f"bench-stream-{self.tag}"
        self.per_key = DEFAULT_MAX_CONNECTIONS_PER_KEY
        self.keys = [f"bench-stream-{self.tag}-key-{i}"
                     for i in range(math.ceil(args.clients / self.per_key))]
        # warm-up + latency + throughput, for the service and for the floor server
        per_target = 1 + args.latency_events + args.runs * args.events
        self.job_ids = [str(uuid.uuid4()) for _ in range(per_target)]
        self.floor_job_ids = [str(uuid.uuid4()) for _ in range(per_target)]
        self.redis_url = ""
        self.nats_url = ""

    def client_config(self, url: str, pid: int, jobs: list[str], prefix: str,
                      latency_events: int) -> dict[str, Any]:
        a = self.args
        return {"url": url, "pid": pid, "keys": self.keys, "per_key": self.per_key,
                "tenant": self.tenant, "topic": TOPIC, "job_ids": jobs,
                "trace_prefix": prefix, "nats_url": self.nats_url, "clients": a.clients,
                "sse": a.sse, "deflate": a.deflate, "connect_concurrency": 50,
                "settle_s": 2.0, "latency_events": latency_events,
                "latency_rate": a.latency_rate, "runs": a.runs, "events": a.events,
                "window": a.window}


async def store_jobs(redis_url: str, tenant: str, job_ids: list[str]) -> None:
    """Each job's meta, as the gateway stores an accepted job (the writer reads it)."""
    import redis.asyncio as aioredis

    from cordum.store.jobs import JobStore, NewJob

    redis = aioredis.from_url(redis_url)
    store = JobStore(redis, retention_s=3600)
    try:
        for i in range(0, len(job_ids), STORE_BATCH):
            await asyncio.gather(*(store.create(NewJob(
                job_id=job_id, trace_id=f"trace-{job_id}", tenant=tenant, topic=TOPIC,
                context="{}", request="{}", meta={})) for job_id in job_ids[i:i + STORE_BATCH]))
    finally:
        await redis.aclose()


async def stream_mark(nats_url: str) -> tuple[str | None, int]:
    """The job stream holding sys.job.submit, and the sequence our packets start after."""
    import nats
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import NotFoundError, ServiceUnavailableError

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        try:
            name = await js.find_stream_name_by_subject("sys.job.submit")
        except (NotFoundError, ServiceUnavailableError, NoRespondersError, NatsTimeout):
            return None, 0  # no such stream, or no JetStream (a private server)
        return name, (await js.stream_info(name)).state.last_seq + 1
    finally:
        await nc.close()


async def drop_ours(nats_url: str, stream: str | None, first: int, job_ids: set[str]) -> None:
    """Our packets out of the job stream: a stack's bridge must never forward them."""
    if stream is None:
        return
    import nats

    from tests.helpers import drop_from_stream

    nc = await nats.connect(nats_url)
    try:
        await drop_from_stream(nc.jetstream(), stream, first,
                               lambda p: p.job_request.job_id in job_ids)
    finally:
        await nc.close()


def run_clients(cfg: dict[str, Any], workdir: Path, name: str) -> dict[str, Any]:
    cfg_path, out_path = workdir / f"{name}-config.json", workdir / f"{name}-out.json"
    cfg_path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "tests.bench.stream_clients", str(cfg_path),
                           str(out_path)], env=env, cwd=ROOT, check=False,
                          timeout=CLIENTS_TIMEOUT_S,
                          preexec_fn=nofile_raiser(cfg["clients"] * 2 + 256))
    if proc.returncode != 0 or not out_path.exists():
        raise SystemExit(f"the clients' process failed ({proc.returncode})")
    return json.loads(out_path.read_text())  # type: ignore[no-any-return]


def start_service(run: Run, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CORDUM_API_KEYS", "STREAM_"))}
    env.update({
        "PYTHONPATH": str(ROOT / "shared"), "REDIS_URL": run.redis_url, "NATS_URL": run.nats_url,
        "CORDUM_API_KEYS": json.dumps([{"key": k, "tenant": run.tenant, "role": "user"}
                                       for k in run.keys]),
        "STREAM_HOST": "127.0.0.1", "STREAM_PORT": str(port),
        "STREAM_QUEUE_GROUP": f"cordum-stream-bench-{run.tag}",
        "STREAM_SUBJECT_PREFIX": f"cordum.stream.bench{run.tag}", "LOG_LEVEL": "WARNING"})
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "cordum.stream"], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=nofile_raiser(run.args.clients * 2 + 256))


def start_floor(run: Run, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "tests.bench.stream_floor", "--port",
                                 str(port), "--tenant", run.tenant, "--nats-url", run.nats_url],
                                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=nofile_raiser(run.args.clients * 2 + 256))


def against(run: Run, workdir: Path, name: str, jobs: list[str], latency_events: int
            ) -> dict[str, Any]:
    """Start the server ``name`` (service or floor), run the clients against it, stop it."""
    port, log = free_port(), workdir / f"{name}.log"
    proc = (start_service if name == "service" else start_floor)(run, port, log)
    try:
        wait_healthy(port, proc, log)
        progress(f"{name}: pid {proc.pid} on 127.0.0.1:{port}")
        cfg = run.client_config(f"http://127.0.0.1:{port}/api/v1/stream", proc.pid, jobs,
                                f"bench-{run.tag}-{name[0]}-", latency_events)
        out = run_clients(cfg, workdir, name)
    finally:
        stop(proc)
    errors = [line for line in log.read_text(errors="replace").splitlines()
              if " ERROR " in line or "Traceback" in line]
    out["server_errors"] = errors[:5]
    out["server_exit"] = proc.returncode
    return out


def kib(v: float) -> float:
    return v / 1024


def summarize(name: str, out: dict[str, Any], clients: int) -> dict[str, Any]:
    lat = out["latency"]
    tp = out["throughput"]
    return {
        "server": name, "connected": out["connected"], "connect_s": out["connect_s"],
        "connect_service_cpu_s": out["connect_usage"]["service_cpu_s"],
        "rss_mib_start": kib(out["rss_kib_start"]), "rss_mib_0": kib(out["rss_kib_0"]),
        "rss_mib_idle": kib(out["rss_kib_idle"]), "rss_mib_after": kib(out["rss_kib_after"]),
        "rss_mib_closed": kib(out["rss_kib_closed"]),
        "kib_per_conn_idle": (out["rss_kib_idle"] - out["rss_kib_0"]) / clients,
        "kib_per_conn_after": (out["rss_kib_after"] - out["rss_kib_0"]) / clients,
        "latency_events": lat["events"], "latency_rate": lat["rate"],
        "latency_n": len(lat["latencies_us"]), "floor_n": len(lat["floor_us"]),
        "latency_p50_ms": percentile(lat["latencies_us"], 50) / 1000,
        "latency_p99_ms": percentile(lat["latencies_us"], 99) / 1000,
        "latency_max_ms": max(lat["latencies_us"], default=math.nan) / 1000,
        "floor_p50_ms": percentile(lat["floor_us"], 50) / 1000,
        "floor_p99_ms": percentile(lat["floor_us"], 99) / 1000,
        "latency_usage": lat["usage"], "latency_not_delivered": lat["not_delivered"],
        "runs": [{"events_per_s": r["events_per_s"], "frames_per_s": r["frames_per_s"],
                  "frames": r["frames"], "not_delivered": r["not_delivered"],
                  "latency_p50_ms": (r["latency_p50_us"] or math.nan) / 1000,
                  "latency_p99_ms": (r["latency_p99_us"] or math.nan) / 1000,
                  "service_cpu_pct": r["usage"]["service_cpu_pct"],
                  "clients_cpu_pct": r["usage"]["clients_cpu_pct"],
                  "machine_busy_pct": r["usage"]["machine_busy_pct"],
                  "service_cpu_us_per_frame": 1e6 * r["usage"]["service_cpu_s"]
                  / max(1, r["frames"]),
                  "clients_cpu_us_per_frame": 1e6 * r["usage"]["clients_cpu_s"]
                  / max(1, r["frames"]),
                  "wall_s": r["usage"]["wall_s"]} for r in tp],
        "still_connected": out["still_connected"], "closed_by_server": out["closed_by_server"],
        "frame_chars": out["frame_chars"], "events_published": out["events_published"],
        "server_errors": out["server_errors"],
    }


def figures(svc: dict[str, Any], flr: dict[str, Any], raw_svc: dict[str, Any],
            raw_flr: dict[str, Any], clients: int) -> list[dict[str, Any]]:
    lat = raw_svc["latency"]["latencies_us"]
    floor = raw_svc["latency"]["floor_us"]
    runs, floor_runs = svc["runs"], flr["runs"]

    def per_slice(values: list[float], p: float) -> list[float]:
        return [percentile(s, p) / 1000 for s in slices_of(values, SLICES)]

    def col(rows: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] for r in rows]

    bare_lat = raw_flr["latency"]["latencies_us"]
    return [
        figure("stream_latency_p50", f"NATS publish to frame at each of {clients:,} clients, "
               "p50 over (client, event)", "ms", per_slice(lat, 50),
               floor=per_slice(floor, 50),
               note=f"over all {len(lat):,} frames: p50 {svc['latency_p50_ms']:.1f} ms; "
                    f"floor: a bare NATS subscriber (n={len(floor)}); bare aiohttp fan-out "
                    f"p50 {percentile(bare_lat, 50) / 1000:.1f} ms"),
        figure("stream_latency_p99", "NATS publish to frame at each client, p99 over "
               "(client, event)", "ms", per_slice(lat, 99), floor=per_slice(floor, 99),
               note=f"over all: p99 {svc['latency_p99_ms']:.1f} ms, max "
                    f"{svc['latency_max_ms']:.1f} ms; bare aiohttp fan-out p99 "
                    f"{percentile(bare_lat, 99) / 1000:.1f} ms"),
        figure("stream_events_per_s", f"events per second to {clients:,} clients "
               "(bounded in flight, one service process)", "events/s",
               col(runs, "events_per_s"), floor=col(floor_runs, "events_per_s"),
               higher_is_better=True,
               note="floor: a bare aiohttp server writing one text per event to every "
                    "connection from its NATS callback"),
        figure("stream_frames_per_s", "  frames delivered per second", "frames/s",
               col(runs, "frames_per_s"), floor=col(floor_runs, "frames_per_s"),
               higher_is_better=True),
        figure("stream_service_cpu", "  service process CPU over each run (one core = "
               "100 %)", "%", col(runs, "service_cpu_pct"),
               floor=col(floor_runs, "service_cpu_pct"),
               note=f"clients' process {fmt(_median(col(runs, 'clients_cpu_pct')), 0)} %, "
                    f"machine {fmt(_median(col(runs, 'machine_busy_pct')), 0)} % of "
                    f"{os.cpu_count()} cores"),
        figure("stream_cpu_per_frame", "  service CPU per delivered frame", "µs",
               col(runs, "service_cpu_us_per_frame"),
               floor=col(floor_runs, "service_cpu_us_per_frame"),
               note=f"clients' process: "
                    f"{fmt(_median(col(runs, 'clients_cpu_us_per_frame')), 1)} µs per frame"),
        figure("stream_kib_per_connection", f"service RSS per idle connection ({clients:,} "
               "connected less 0)", "KiB", [svc["kib_per_conn_idle"]],
               floor=[flr["kib_per_conn_idle"]],
               note=f"RSS {svc['rss_mib_0']:.1f} MiB with 0 clients, "
                    f"{svc['rss_mib_idle']:.1f} MiB with {svc['connected']:,}"),
        figure("stream_kib_per_connection_after", "  per connection after the events "
               "(write buffers, compressors)", "KiB", [svc["kib_per_conn_after"]],
               floor=[flr["kib_per_conn_after"]],
               note=f"RSS {svc['rss_mib_after']:.1f} MiB; "
                    f"{svc['rss_mib_closed']:.1f} MiB after every client left"),
    ]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.nan


def print_table(svc: dict[str, Any], flr: dict[str, Any]) -> None:
    def row(label: str, a: str, b: str) -> None:
        print(f"  {label:<52} {a:>14} {b:>14}")

    row("", "cordum-stream", "bare floor")
    row("clients connected (connect time)", f"{svc['connected']:,} ({svc['connect_s']:.1f} s)",
        f"{flr['connected']:,} ({flr['connect_s']:.1f} s)")
    for label, key in (("RSS at start, MiB", "rss_mib_start"), ("RSS 0 clients, MiB", "rss_mib_0"),
                       ("RSS all connected, idle, MiB", "rss_mib_idle"),
                       ("RSS after the events, MiB", "rss_mib_after"),
                       ("RSS all gone, MiB", "rss_mib_closed"),
                       ("KiB per idle connection", "kib_per_conn_idle"),
                       ("KiB per connection after events", "kib_per_conn_after"),
                       ("latency p50 ms (NATS floor)", "latency_p50_ms"),
                       ("latency p99 ms", "latency_p99_ms")):
        row(label, fmt(svc[key], 1), fmt(flr[key], 1))
    row("bare NATS subscriber p50 / p99 ms", f"{svc['floor_p50_ms']:.2f} / "
        f"{svc['floor_p99_ms']:.2f}", f"{flr['floor_p50_ms']:.2f} / {flr['floor_p99_ms']:.2f}")
    lu, fu = svc["latency_usage"], flr["latency_usage"]
    row("latency phase: server CPU %, clients CPU %", f"{lu['service_cpu_pct']:.0f}, "
        f"{lu['clients_cpu_pct']:.0f}", f"{fu['service_cpu_pct']:.0f}, {fu['clients_cpu_pct']:.0f}")
    for i, (a, b) in enumerate(zip(svc["runs"], flr["runs"], strict=False), 1):
        row(f"run {i}: events/s (frames/s)", f"{a['events_per_s']:.1f} "
            f"({a['frames_per_s'] / 1000:.1f}k)", f"{b['events_per_s']:.1f} "
            f"({b['frames_per_s'] / 1000:.1f}k)")
        row(f"run {i}: CPU % server / clients / machine",
            f"{a['service_cpu_pct']:.0f}/{a['clients_cpu_pct']:.0f}/{a['machine_busy_pct']:.0f}",
            f"{b['service_cpu_pct']:.0f}/{b['clients_cpu_pct']:.0f}/{b['machine_busy_pct']:.0f}")
        row(f"run {i}: CPU µs per frame server / clients",
            f"{a['service_cpu_us_per_frame']:.1f}/{a['clients_cpu_us_per_frame']:.1f}",
            f"{b['service_cpu_us_per_frame']:.1f}/{b['clients_cpu_us_per_frame']:.1f}")
        row(f"run {i}: latency in flight p50 / p99 ms",
            f"{a['latency_p50_ms']:.0f} / {a['latency_p99_ms']:.0f}",
            f"{b['latency_p50_ms']:.0f} / {b['latency_p99_ms']:.0f}")


def measure(args: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    shared = os.environ.get(SHARED_NATS_VAR, "").strip()
    with contextlib.nullcontext(shared) if shared else private_nats() as nats_url:
        return measure_on(args, nats_url, private=not shared)


def measure_on(args: Any, nats_url: str, *, private: bool
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from tests import redis_db

    run = Run(args)
    run.nats_url = nats_url
    run.redis_url = redis_db.claim(SERVER_REDIS_URL)
    progress(f"tenant {run.tenant}: {args.clients:,} clients on {len(run.keys)} keys; "
             f"Redis {run.redis_url}; NATS {nats_url}; storing {len(run.job_ids):,} jobs")
    stream, first = asyncio.run(stream_mark(nats_url))
    try:
        asyncio.run(store_jobs(run.redis_url, run.tenant, run.job_ids))
        with tempfile.TemporaryDirectory(prefix="cordum-bench-stream-") as tmp:
            work = Path(tmp)
            raw_svc = against(run, work, "service", run.job_ids, args.latency_events)
            raw_flr = against(run, work, "floor", run.floor_job_ids,
                              min(args.latency_events, FLOOR_LATENCY_EVENTS))
    finally:
        if stream is not None:
            t0 = time.monotonic()
            asyncio.run(drop_ours(nats_url, stream, first,
                                  set(run.job_ids) | set(run.floor_job_ids)))
            progress(f"our packets dropped from {stream} in {time.monotonic() - t0:.1f} s")
        redis_db.release()
    svc = summarize("service", raw_svc, args.clients)
    flr = summarize("floor", raw_flr, args.clients)
    info = {"clients": args.clients, "sse": args.sse, "deflate": args.deflate,
            "keys": len(run.keys), "per_key": run.per_key, "tenants": 1,
            "latency_events": args.latency_events, "latency_rate": args.latency_rate,
            "events": args.events, "runs": args.runs, "window": args.window,
            "frame_bytes": svc["frame_chars"], "cores": os.cpu_count(),
            "nats": "a nats-server of its own" if private else nats_url,
            "python": platform.python_version(), "service": svc, "floor": flr}
    return figures(svc, flr, raw_svc, raw_flr, args.clients), info


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=env_int("BENCH_STREAM_CLIENTS", 1000))
    parser.add_argument("--sse", type=int, default=env_int("BENCH_STREAM_SSE", 0),
                        help="how many of the clients read Server-Sent Events")
    parser.add_argument("--no-deflate", dest="deflate", action="store_false",
                        help="WebSockets that do not offer permessage-deflate")
    parser.add_argument("--latency-events", type=int,
                        default=env_int("BENCH_STREAM_LATENCY_EVENTS", 100))
    parser.add_argument("--latency-rate", type=float,
                        default=env_float("BENCH_STREAM_LATENCY_RATE", 5.0))
    parser.add_argument("--events", type=int, default=env_int("BENCH_STREAM_EVENTS", 200),
                        help="events per throughput run")
    parser.add_argument("--runs", type=int, default=env_int("BENCH_STREAM_RUNS", 3))
    parser.add_argument("--window", type=int, default=env_int("BENCH_STREAM_WINDOW", 16),
                        help="events in flight at most (not yet at every client)")
    args = parser.parse_args(argv)
    if os.environ.get("BENCH_STREAM_DEFLATE", "1") == "0":
        args.deflate = False
    figs, info = measure(args)
    svc = info["service"]
    print(f"setup: {info['clients']:,} clients ({info['sse']} SSE, WebSocket permessage-deflate "
          f"{'offered' if info['deflate'] else 'not offered'}), 1 tenant, {info['keys']} keys "
          f"x {info['per_key']}; frame {info['frame_bytes']:,} bytes (job.submit protojson); "
          f"latency: {info['latency_events']} events at {info['latency_rate']:g}/s; "
          f"throughput: {info['runs']} runs x {info['events']} events, window "
          f"{info['window']}; {info['cores']} cores; still connected at the end "
          f"{svc['still_connected']:,}, closed by the server {svc['closed_by_server'] or 'none'}"
          + (f"; server errors: {svc['server_errors']}" if svc["server_errors"] else ""))
    print_table(svc, info["floor"])
    emit(args.json, figs, info)


if __name__ == "__main__":
    main()
