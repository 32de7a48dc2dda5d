"""The clients of ``bench_stream``, in a process of their own so that the service's CPU
and memory are the service's alone.

One process holds every client (WebSockets by default, some Server-Sent Events with
``sse``), a bare NATS subscriber (the latency floor) and the publisher: each event is a
``job.submit`` BusPacket of a job whose meta the benchmark stored, published on
``sys.job.submit`` with its publish time (``time.time_ns()``, the host's realtime clock,
which every process reads alike) and its sequence number in its ``traceId``. A client
reads them back from the frame's text (no JSON parse), so a frame costs the client as
little as it can; the floor subscriber reads them from the packet's bytes.

Phases, in order (the service's RSS and CPU read from /proc/<pid>):

1. one client opens a stream and receives one event (the service's first stream and
   frame pay for lazy imports and caches), leaves; the service's RSS with 0 clients;
2. every client connects (``connect_concurrency`` handshakes at once); after
   ``settle_s`` the RSS with them all connected and idle;
3. latency: ``latency_events`` events at ``latency_rate`` per second, each frame's
   arrival at each client (and at the floor subscriber) timed;
4. throughput: ``runs`` runs of ``events`` events, published as fast as every client
   receives them with at most ``window`` events not yet received by all in flight;
   delivered frames and events per second, the service's, this process's and the
   machine's CPU over each run;
5. the RSS after the events (buffers and compressors grown), then with every client
   gone.

    python -m tests.bench.stream_clients CONFIG.json OUT.json
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

TRACE_MARK = '"traceId":"'
EVENT_TIMEOUT_S = 10.0
"""How long an event may take to reach every client before it counts as not delivered."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
SUBMIT_SUBJECT = "sys.job.submit"


def progress(msg: str) -> None:
    print(f"    [clients] {msg}", file=sys.stderr, flush=True)


def raise_nofile(wanted: int) -> int:
    """RLIMIT_NOFILE's soft limit up to ``wanted`` (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


# ------------------------------------------------------------------ /proc


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    rest = raw[raw.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def rss_settled(pid: int, samples: int = 5, every_s: float = 0.1) -> int:
    """The median of a few RSS readings (the allocator returns memory in steps)."""
    got = []
    for _ in range(samples):
        got.append(rss_kib(pid))
        await asyncio.sleep(every_s)
    return sorted(got)[len(got) // 2]


@dataclass
class Usage:
    """CPU of the service, of this process and of the machine over a stretch of time."""

    pid: int
    t0: float = 0.0
    service0: float = 0.0
    self0: float = 0.0
    machine0: tuple[int, int] = (0, 0)

    def start(self) -> Usage:
        self.t0, self.service0 = time.monotonic(), cpu_s(self.pid)
        self.self0, self.machine0 = self_cpu_s(), machine_ticks()
        return self

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        busy, total = machine_ticks()
        cores = os.cpu_count() or 1
        return {"wall_s": wall,
                "service_cpu_s": cpu_s(self.pid) - self.service0,
                "service_cpu_pct": 100 * (cpu_s(self.pid) - self.service0) / wall,
                "clients_cpu_s": self_cpu_s() - self.self0,
                "clients_cpu_pct": 100 * (self_cpu_s() - self.self0) / wall,
                "machine_busy_pct": 100 * cores * (busy - self.machine0[0])
                / max(1, total - self.machine0[1]),
                "cores": cores}


# ------------------------------------------------------------------ what arrives


@dataclass
class Tracker:
    """Frames received, by event; latencies while a phase records them."""

    prefix: str
    total: int
    counts: list[int] = field(default_factory=list)
    expected: int = 0
    """Clients connected now: an event is delivered once this many received it."""
    waiters: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    latencies: list[int] | None = None
    """Nanoseconds, publish to arrival, per (client, event), while a phase records."""
    floor: list[int] | None = None
    frames: int = 0
    frame_chars: int = 0
    closed: dict[str, int] = field(default_factory=dict)
    """Clients the server closed, by close code."""

    def __post_init__(self) -> None:
        self.counts = [0] * self.total

    def trace(self, text: str) -> tuple[int, int] | None:
        """(sequence, publish ns) from a frame's traceId; None for another event."""
        at = text.find(TRACE_MARK)
        if at < 0:
            return None
        at += len(TRACE_MARK)
        value = text[at:text.index('"', at)]
        if not value.startswith(self.prefix):
            return None
        seq, _, sent = value[len(self.prefix):].partition("-")
        return int(seq), int(sent)

    def on_text(self, text: str, now_ns: int) -> None:
        got = self.trace(text)
        if got is None:
            return
        seq, sent = got
        self.frames += 1
        self.frame_chars = len(text)
        if self.latencies is not None:
            self.latencies.append(now_ns - sent)
        count = self.counts[seq] = self.counts[seq] + 1
        if count >= self.expected:
            self.settle(seq)

    def settle(self, seq: int) -> None:
        waiter = self.waiters.pop(seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_floor(self, data: bytes, now_ns: int) -> None:
        if self.floor is None:
            return
        at = data.find(self.prefix.encode())
        if at < 0:
            return
        end = at + len(self.prefix)
        stop = end
        while stop < len(data) and data[stop] in b"0123456789-":
            stop += 1
        _, _, sent = data[end:stop].decode().partition("-")
        self.floor.append(now_ns - int(sent))

    def gone(self, code: Any) -> None:
        self.expected -= 1
        name = str(code)
        self.closed[name] = self.closed.get(name, 0) + 1
        for seq in list(self.waiters):
            if self.counts[seq] >= self.expected:
                self.settle(seq)


def b64url(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


async def read_ws(ws: aiohttp.ClientWebSocketResponse, tracker: Tracker,
                  stop: asyncio.Event) -> None:
    text_type = aiohttp.WSMsgType.TEXT
    try:
        async for msg in ws:
            if msg.type is text_type:
                tracker.on_text(msg.data, time.time_ns())
    except (aiohttp.ClientError, ConnectionError):
        pass
    finally:
        if not stop.is_set():
            tracker.gone(ws.close_code)


async def read_sse(response: aiohttp.ClientResponse, tracker: Tracker,
                   stop: asyncio.Event) -> None:
    buffer = ""
    try:
        async for chunk in response.content.iter_any():
            now = time.time_ns()
            buffer += chunk.decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                for line in block.split("\n"):
                    if line.startswith("data: "):
                        tracker.on_text(line[6:], now)
    except (aiohttp.ClientError, ConnectionError):
        pass
    finally:
        if not stop.is_set():
            tracker.gone("sse-ended")


# ------------------------------------------------------------------ the run


class Load:
    def __init__(self, cfg: dict[str, Any]) -> None:
        from cordum import protocol

        self.cfg = cfg
        self.protocol = protocol
        self.pid = int(cfg["pid"])
        self.prefix = cfg["trace_prefix"]
        self.jobs: list[str] = cfg["job_ids"]
        self.tracker = Tracker(self.prefix, len(self.jobs))
        self.stop = asyncio.Event()
        self.readers: list[asyncio.Task[None]] = []
        self.sockets: list[Any] = []
        self.next_seq = 0
        self.nc: Any = None
        self.floor_nc: Any = None
        self.requests = [self._request(job_id) for job_id in self.jobs]

    def _request(self, job_id: str) -> Any:
        """The JobRequest the gateway would publish for an API submit of this job."""
        from cordum.gateway.jobs.models import SubmitJobRequest
        from cordum.gateway.jobs.submission import build_request

        body = SubmitJobRequest(prompt="bench", topic=self.cfg["topic"],
                                labels={"team": "bench", "env": "bench"},
                                actor_id="bench-user", actor_type="human",
                                capability="echo")
        return build_request(body, job_id, self.cfg["tenant"], "bench-user")

    async def publish(self, seq: int) -> None:
        packet = self.protocol.packet(trace_id="-", sender_id=self.protocol.SENDER_GATEWAY,
                                      job_request=self.requests[seq])
        packet.trace_id = f"{self.prefix}{seq}-{time.time_ns()}"
        await self.nc.publish(SUBMIT_SUBJECT, packet.SerializeToString())

    async def publish_waited(self, seq: int) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self.tracker.waiters[seq] = waiter
        await self.publish(seq)
        return waiter

    def take(self, n: int) -> list[int]:
        seqs = list(range(self.next_seq, self.next_seq + n))
        if seqs and seqs[-1] >= len(self.jobs):
            raise RuntimeError(f"{len(self.jobs)} jobs stored, {seqs[-1] + 1} events wanted")
        self.next_seq += n
        return seqs

    async def open_one(self, http: aiohttp.ClientSession, i: int, sse: bool) -> None:
        keys = self.cfg["keys"]
        key = keys[i // self.cfg["per_key"] % len(keys)]
        url = self.cfg["url"]
        if sse:
            response = await http.get(url, headers={"Accept": "text/event-stream",
                                                    "X-API-Key": key})
            if response.status != 200:
                raise RuntimeError(f"SSE stream {i}: {response.status} {await response.text()}")
            self.sockets.append(response)
            task = asyncio.create_task(read_sse(response, self.tracker, self.stop))
        else:
            ws = await http.ws_connect(
                url, headers={"Sec-WebSocket-Protocol": f"cordum-api-key, {b64url(key)}"},
                compress=15 if self.cfg["deflate"] else 0, autoping=True)
            self.sockets.append(ws)
            task = asyncio.create_task(read_ws(ws, self.tracker, self.stop))
        self.tracker.expected += 1
        self.readers.append(task)

    async def open_all(self, http: aiohttp.ClientSession, n: int, n_sse: int) -> float:
        gate = asyncio.Semaphore(self.cfg["connect_concurrency"])
        t0 = time.monotonic()

        async def one(i: int) -> None:
            async with gate:
                await self.open_one(http, i, sse=i >= n - n_sse)

        await asyncio.gather(*(one(i) for i in range(n)))
        return time.monotonic() - t0

    async def close_all(self) -> None:
        self.stop.set()
        for sock in self.sockets:
            if isinstance(sock, aiohttp.ClientResponse):
                sock.close()
            else:
                await sock.close()
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        self.sockets.clear()
        self.readers.clear()
        self.tracker.expected = 0
        self.stop = asyncio.Event()

    async def wait_all(self, waiters: list[asyncio.Future[None]]) -> int:
        """Wait for the events to reach every client; the number that did not in time."""
        if not waiters:
            return 0
        _, late = await asyncio.wait(waiters, timeout=EVENT_TIMEOUT_S)
        return len(late)

    async def warm_up(self, http: aiohttp.ClientSession) -> None:
        await self.open_one(http, 0, sse=False)
        (seq,) = self.take(1)
        waiter = await self.publish_waited(seq)
        if await self.wait_all([waiter]):
            raise RuntimeError("the warm-up event did not reach its client")
        await self.close_all()

    async def latency(self) -> dict[str, Any]:
        tr = self.tracker
        seqs = self.take(self.cfg["latency_events"])
        tr.latencies, tr.floor = [], []
        rate = self.cfg["latency_rate"]
        usage = Usage(self.pid).start()
        waiters = []
        t0 = time.monotonic()
        for k, seq in enumerate(seqs):
            await asyncio.sleep(max(0.0, t0 + k / rate - time.monotonic()))
            waiters.append(await self.publish_waited(seq))
        late = await self.wait_all(waiters)
        await asyncio.sleep(0.2)  # the floor's last callbacks
        out = {"events": len(seqs), "rate": rate, "not_delivered": late,
               "latencies_us": [round(v / 1000, 1) for v in tr.latencies],
               "floor_us": [round(v / 1000, 1) for v in tr.floor],
               "usage": usage.stop()}
        tr.latencies, tr.floor = None, None
        return out

    async def throughput(self, n: int) -> dict[str, Any]:
        tr = self.tracker
        seqs = self.take(n)
        window = asyncio.Semaphore(self.cfg["window"])
        late = 0
        tr.latencies = []

        async def one(seq: int) -> None:
            nonlocal late
            try:
                waiter = await self.publish_waited(seq)
                late += await self.wait_all([waiter])
            finally:
                window.release()

        frames0 = tr.frames
        usage = Usage(self.pid).start()
        tasks = []
        for seq in seqs:
            await window.acquire()
            tasks.append(asyncio.create_task(one(seq)))
        await asyncio.gather(*tasks)
        used = usage.stop()
        frames = tr.frames - frames0
        lat = tr.latencies
        tr.latencies = None
        lat.sort()
        return {"events": n, "window": self.cfg["window"], "not_delivered": late,
                "frames": frames, "events_per_s": n / used["wall_s"],
                "frames_per_s": frames / used["wall_s"], "usage": used,
                "latency_p50_us": lat[len(lat) // 2] / 1000 if lat else None,
                "latency_p99_us": lat[int(len(lat) * 0.99)] / 1000 if lat else None}

    async def run(self) -> dict[str, Any]:
        import nats

        cfg = self.cfg
        out: dict[str, Any] = {"nofile": raise_nofile(cfg["clients"] * 2 + 256)}
        self.nc = await nats.connect(cfg["nats_url"], name="cordum-bench-stream-publisher")
        self.floor_nc = await nats.connect(cfg["nats_url"], name="cordum-bench-stream-floor")

        async def on_floor(msg: Any) -> None:
            self.tracker.on_floor(msg.data, time.time_ns())

        await self.floor_nc.subscribe(SUBMIT_SUBJECT, cb=on_floor)
        await self.floor_nc.flush()
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            out["rss_kib_start"] = await rss_settled(self.pid)
            await self.warm_up(http)
            await asyncio.sleep(cfg["settle_s"] / 2)
            out["rss_kib_0"] = await rss_settled(self.pid)
            progress(f"service RSS with 0 clients: {out['rss_kib_0'] / 1024:.1f} MiB; "
                     f"connecting {cfg['clients']:,} clients ({cfg['sse']} SSE)")
            usage = Usage(self.pid).start()
            out["connect_s"] = await self.open_all(http, cfg["clients"], cfg["sse"])
            out["connect_usage"] = usage.stop()
            await asyncio.sleep(cfg["settle_s"])
            out["rss_kib_idle"] = await rss_settled(self.pid)
            out["connected"] = self.tracker.expected
            progress(f"{self.tracker.expected:,} connected in {out['connect_s']:.1f} s; "
                     f"service RSS {out['rss_kib_idle'] / 1024:.1f} MiB")
            out["latency"] = await self.latency()
            progress(f"latency: {cfg['latency_events']} events at {cfg['latency_rate']:g}/s "
                     f"done, service CPU {out['latency']['usage']['service_cpu_pct']:.0f}%")
            out["throughput"] = []
            for r in range(cfg["runs"]):
                got = await self.throughput(cfg["events"])
                out["throughput"].append(got)
                progress(f"throughput run {r + 1}/{cfg['runs']}: {got['events_per_s']:.1f} "
                         f"events/s, {got['frames_per_s']:,.0f} frames/s, service CPU "
                         f"{got['usage']['service_cpu_pct']:.0f}%, clients CPU "
                         f"{got['usage']['clients_cpu_pct']:.0f}%")
            out["rss_kib_after"] = await rss_settled(self.pid)
            out["still_connected"] = self.tracker.expected
            out["closed_by_server"] = dict(self.tracker.closed)
            out["frame_chars"] = self.tracker.frame_chars
            await self.close_all()
            await asyncio.sleep(cfg["settle_s"])
            out["rss_kib_closed"] = await rss_settled(self.pid)
        await self.nc.close()
        await self.floor_nc.close()
        out["events_published"] = self.next_seq
        return out


def main() -> None:
    cfg_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads(cfg_path.read_text())

    async def go() -> dict[str, Any]:
        return await Load(cfg).run()

    out = asyncio.run(go())
    out_path.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
