"""Watching jobs go through the local stack: HTTP submits, NATS taps, Redis reads, logs.

The taps are plain NATS subscriptions beside the stack's own: they see every
packet the gateway publishes on ``sys.job.submit``, every dispatch on
``worker.<id>.jobs``, every result on ``sys.job.result``, and the bridge's
JetStream acks (``$JS.ACK.<stream>.<consumer>....``, whose subject carries the
time the message was stored). None of them takes a message from anyone.
Everything runs on this machine, so one clock serves the client, the taps and
the functions' event timestamps (µs, in ``job:events:<id>``).
"""

from __future__ import annotations

import asyncio
import bisect
import http.client
import json
import os
import re
import threading
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.common import progress, read_local_env, stack_logs_dir

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "DENIED", "OUTPUT_QUARANTINED"}
STREAM = "CORDUM_JOBS"
SUBMIT_CONSUMER = "cordum-bridge-submit"


@dataclass(slots=True)
class Sent:
    job_id: str
    t_send: float
    t_200: float


@dataclass
class Taps:
    """First-seen times (epoch s) by job id, dispatch counts, and the bridge's acks."""

    submit: dict[str, float] = field(default_factory=dict)
    worker: dict[str, float] = field(default_factory=dict)
    result: dict[str, float] = field(default_factory=dict)
    dispatches: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    dispatched_to: dict[str, str] = field(default_factory=dict)
    acks: list[tuple[float, float, int]] = field(default_factory=list)
    """(stored at, acked at, stream seq) of each submit message the bridge acked, epoch s."""


class NatsTaps:
    """The NATS subscriptions, on a loop of their own in a background thread."""

    def __init__(self, nats_url: str) -> None:
        self.url = nats_url
        self.taps = Taps()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._nc: Any = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._connect(), self._loop).result(15)

    def stop(self) -> None:
        if self._nc is not None:
            asyncio.run_coroutine_threadsafe(self._nc.close(), self._loop).result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _connect(self) -> None:
        import nats

        from cordum.protocol import decode

        taps = self.taps

        def job_of(data: bytes, kind: str) -> str:
            try:
                decoded = decode(data)
            except Exception:
                return ""
            return str(getattr(decoded.packet, kind).job_id) if decoded.kind == kind else ""

        async def on_submit(msg: Any) -> None:
            now = time.time()
            job_id = job_of(msg.data, "job_request")
            if job_id:
                taps.submit.setdefault(job_id, now)

        async def on_worker(msg: Any) -> None:
            now = time.time()
            job_id = job_of(msg.data, "job_request")
            if job_id:
                taps.worker.setdefault(job_id, now)
                taps.dispatches[job_id] += 1
                taps.dispatched_to.setdefault(job_id, msg.subject.split(".")[1])

        async def on_result(msg: Any) -> None:
            now = time.time()
            job_id = job_of(msg.data, "job_result")
            if job_id:
                taps.result.setdefault(job_id, now)

        async def on_ack(msg: Any) -> None:
            # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>
            #   .<stored ns>.<pending>
            parts = msg.subject.split(".")
            if len(parts) >= 9 and not msg.data.startswith(b"-NAK"):
                taps.acks.append((int(parts[7]) / 1e9, time.time(), int(parts[5])))

        self._nc = await nats.connect(self.url, name="cordum-bench-taps")
        # A tap that falls behind must queue, not drop: a dropped dispatch would
        # read as a job that never reached its worker.
        limits = {"pending_msgs_limit": 1_000_000, "pending_bytes_limit": 1 << 30}
        await self._nc.subscribe("sys.job.submit", cb=on_submit, **limits)
        await self._nc.subscribe("worker.*.jobs", cb=on_worker, **limits)
        await self._nc.subscribe("sys.job.result", cb=on_result, **limits)
        await self._nc.subscribe(f"$JS.ACK.{STREAM}.{SUBMIT_CONSUMER}.>", cb=on_ack, **limits)
        await self._nc.flush()


class Api:
    """HTTP submits to the stack's REST API, one kept-alive connection per thread."""

    def __init__(self, env: dict[str, str]) -> None:
        self.url = urllib.parse.urlsplit(env["CORDUM_API_URL"])
        self.key = env["CORDUM_API_KEY"]
        self.tenant = env.get("CORDUM_TENANT_ID", "default")
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.url.hostname or "127.0.0.1",
                                              self.url.port or 80, timeout=60)
            self._local.conn = conn
        return conn

    def submit(self, body: dict[str, Any]) -> Sent:
        payload = json.dumps(body).encode()
        headers = {"X-API-Key": self.key, "X-Tenant-ID": self.tenant,
                   "Content-Type": "application/json"}
        for attempt in (1, 2):
            conn = self._conn()
            t0 = time.time()
            try:
                conn.request("POST", f"{self.url.path}/api/v1/jobs", body=payload,
                             headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                continue
            t1 = time.time()
            if resp.status != 200:
                raise RuntimeError(f"submit answered {resp.status}: {raw[:300]!r}")
            return Sent(json.loads(raw)["job_id"], t0, t1)
        raise AssertionError("unreachable")


class Jobs:
    """Reads the jobs' states and event timestamps from the stack's Redis."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)

    def states(self, ids: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for start in range(0, len(ids), 1000):
            chunk = ids[start:start + 1000]
            pipe = self.redis.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hget(f"job:meta:{job_id}", "state")
            out.update(zip(chunk, pipe.execute(), strict=True))
        return out

    def wait_terminal(self, ids: list[str], stall_s: float, what: str) -> dict[str, str]:
        """Poll until every job is terminal, or none became terminal for ``stall_s``."""
        last_done, last_change = -1, time.monotonic()
        while True:
            states = self.states(ids)
            done = sum(1 for s in states.values() if s in TERMINAL)
            if done != last_done:
                progress(f"{what}: {done:,}/{len(ids):,} jobs terminal")
                last_done, last_change = done, time.monotonic()
            if done == len(ids) or time.monotonic() - last_change > stall_s:
                return states
            time.sleep(1.0)

    def events(self, ids: list[str]) -> dict[str, dict[str, list[float]]]:
        """job id -> state -> the epoch seconds of each entry into it."""
        out: dict[str, dict[str, list[float]]] = {}
        for start in range(0, len(ids), 1000):
            chunk = ids[start:start + 1000]
            pipe = self.redis.pipeline(transaction=False)
            for job_id in chunk:
                pipe.lrange(f"job:events:{job_id}", 0, -1)
            for job_id, entries in zip(chunk, pipe.execute(), strict=True):
                states: dict[str, list[float]] = defaultdict(list)
                for raw in entries:
                    event = json.loads(raw)
                    states[event["state"]].append(int(event["ts"]) / 1e6)
                out[job_id] = states
        return out

    def remove(self, ids: list[str], tenant: str) -> None:
        """Delete the jobs' keys and index entries (what the gateway and functions wrote)."""
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            pipe = self.redis.pipeline(transaction=False)
            traces = [f"trace:{t}" for t in self._traces(chunk) if t]
            for job_id in chunk:
                pipe.delete(f"job:meta:{job_id}", f"job:req:{job_id}", f"job:events:{job_id}",
                            f"ctx:{job_id}", f"res:{job_id}")
            if traces:
                pipe.delete(*traces)
            for state in ("pending", "scheduled", "dispatched", "running", "succeeded",
                          "failed", "timeout", "cancelled", "denied"):
                pipe.zrem(f"job:index:{state}", *chunk)
            pipe.zrem("job:recent", *chunk)
            pipe.zrem("job:deadline", *chunk)
            pipe.srem(f"job:tenant:active:{tenant}", *chunk)
            pipe.execute()

    def _traces(self, ids: list[str]) -> list[str]:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(f"job:meta:{job_id}", "trace_id")
        return [t or "" for t in pipe.execute()]


class BridgeMonitor:
    """The bridge's guard scripts as Redis runs them (``MONITOR``), by stream sequence.

    ``claim`` runs before the SQS call and ``settle`` after it, so the two split
    the bridge hop into delivery, the queue call and the ack. MONITOR slows a
    Redis down; it runs only while the latency run's few jobs a second go by.
    """

    def __init__(self, redis_url: str) -> None:
        import hashlib

        import redis

        from tests.bench.common import ROOT

        lua = ROOT / "shared" / "cordum" / "bus" / "lua"
        self._kinds = {hashlib.sha1((lua / f"{n}.lua").read_bytes()).hexdigest(): n
                       for n in ("claim", "settle")}
        self._redis = redis.Redis.from_url(redis_url)
        self.seen: dict[int, dict[str, float]] = defaultdict(dict)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        prefix = f"cordum:bus:processed:{STREAM}:"
        try:
            with self._redis.monitor() as mon:
                for cmd in mon.listen():
                    if self._stop.is_set():
                        return
                    words = str(cmd.get("command", "")).split()
                    if len(words) < 4 or words[0] != "EVALSHA" or words[1] not in self._kinds:
                        continue
                    kind = self._kinds[words[1]]
                    for word in words[3:3 + int(words[2])]:
                        if word.startswith(prefix):
                            self.seen[int(word[len(prefix):])].setdefault(kind,
                                                                          float(cmd["time"]))
        except Exception as exc:  # a monitor that dies only costs the bridge split
            progress(f"redis MONITOR stopped: {type(exc).__name__}: {exc}")


def match_acks(taps: Taps, sent: list[Sent]) -> dict[str, tuple[float, int]]:
    """job id -> (when the bridge acked its submit message, its stream seq).

    An ack names the message by its stored time, not its job: each job takes the
    ack whose stored time is nearest to when the submit tap saw its packet
    (both the same instant give or take the server's fan-out), within 50 ms.
    """
    acks = sorted(taps.acks)
    stored = [a[0] for a in acks]
    out: dict[str, tuple[float, int]] = {}
    for s in sent:
        seen = taps.submit.get(s.job_id)
        if seen is None:
            continue
        i = bisect.bisect_left(stored, seen)
        best = min((j for j in (i - 1, i) if 0 <= j < len(acks)),
                   key=lambda j: abs(stored[j] - seen), default=None)
        if best is not None and abs(stored[best] - seen) < 0.05:
            out[s.job_id] = (acks[best][1], acks[best][2])
    return out


# ------------------------------------------------------------------ function logs


class LogWindow:
    """What a function (or, by ``pattern``, a service) wrote to its log file from now
    on (the stack's .cordum/logs)."""

    def __init__(self, function: str, pattern: str = "") -> None:
        self.function = function
        self.pattern = pattern or f"lambda-*{function}*.log"
        self.path: Path | None = self._find()
        self.offset = self.path.stat().st_size if self.path else 0

    def _find(self) -> Path | None:
        matches = sorted(stack_logs_dir().glob(self.pattern))
        return matches[0] if matches else None

    def text(self) -> str:
        if self.path is None:
            # A function not invoked yet has no log file: all it wrote came later.
            self.path = self._find()
        if self.path is None:
            return ""
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            return fh.read().decode(errors="replace")


_REPORT = re.compile(r"^REPORT RequestId: \S+\s+Duration: ([0-9.]+) ms", re.M)


def report_durations(text: str) -> list[float]:
    """The Duration of each invocation (the executor's REPORT lines), in order."""
    return [float(m) for m in _REPORT.findall(text)]


def emf_values(text: str, metric: str, **dimensions: str) -> list[float]:
    """Every value of ``metric`` in the EMF lines whose dimensions match, in order."""
    out: list[float] = []
    for line in text.splitlines():
        if not line.startswith('{"_aws"') or f'"{metric}"' not in line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if any(doc.get(k) != v for k, v in dimensions.items()):
            continue
        value = doc.get(metric)
        out += [float(v) for v in value] if isinstance(value, list) else [float(value)]
    return out


@dataclass(frozen=True, slots=True)
class SqsCall:
    """One SendMessageBatch of the bridge, as its call log says (cordum.bus.sqs)."""

    queue: str
    entries: int
    started: float
    """Epoch seconds."""
    ms: float
    job_ids: tuple[str, ...]


_SQS_CALL = re.compile(r"sqs call SendMessageBatch queue=(\S+) entries=(\d+) "
                       r"started=([0-9.]+) ms=([0-9.]+) job_ids=(\S*)")


def sqs_calls(text: str, queue: str) -> list[SqsCall]:
    """The bridge's SendMessageBatch calls to ``queue`` (its name), in order.

    Written only by a bridge started with BRIDGE_SQS_CALL_LOG=1."""
    out = []
    for m in _SQS_CALL.finditer(text):
        if m.group(1) == queue:
            out.append(SqsCall(m.group(1), int(m.group(2)), float(m.group(3)),
                               float(m.group(4)), tuple(m.group(5).split(","))))
    return out


def stack_env() -> dict[str, str]:
    env = read_local_env()
    missing = [k for k in ("CORDUM_API_URL", "CORDUM_API_KEY", "REDIS_URL", "NATS_URL")
               if not env.get(k)]
    if missing:
        raise SystemExit(f"the stack's env file has no {', '.join(missing)}: is the stack up? "
                         f"(CORDUM_LOCAL_ENV={os.environ.get('CORDUM_LOCAL_ENV', '')})")
    return env
