"""Sustained load through the local stack: BENCH_SUSTAINED_JOBS echo jobs (default
10,000) submitted over HTTP by BENCH_SUSTAINED_CONCURRENCY clients (default 8),
with two echo workers (the stack's and one started here, stopped after).

Checked: no job lost (every job terminal), none dispatched twice (one
DISPATCHED entry in its event log, one packet on the workers' subjects).
Measured: throughput, submit to terminal, over the whole run and in ten
consecutive slices of completions; Redis memory per stored job, from the
keys of sampled jobs (``MEMORY USAGE``) plus their share of the state index,
and, for comparison, the change of ``used_memory`` over the run (the Redis is
shared, so that one is noisy). Run:

    python -m tests.bench.bench_sustained
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, cli, emit, env_int, figure, progress, summary
from tests.bench.stack_probe import TERMINAL, Api, Jobs, NatsTaps, Sent, stack_env

SLICES = 10


class SecondWorker:
    """One more echo worker process, started as the stack starts its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.worker_id = f"bench-echo-{os.getpid()}"
        self._env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
                     "REDIS_URL": env["REDIS_URL"], "NATS_URL": env["NATS_URL"],
                     "CORDUM_CONFIG_DIR": str(ROOT / "config"), "WORKER_ID": self.worker_id}
        self._log = tempfile.NamedTemporaryFile(prefix="cordum-bench-echo-", suffix=".log",
                                                delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, jobs: Jobs) -> None:
        import json

        self.proc = subprocess.Popen([sys.executable, "-m", "cordum.worker.echo"],
                                     env=self._env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        progress(f"second echo worker {self.worker_id} started (pid {self.proc.pid})")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            raw = jobs.redis.get("sys:workers:snapshot")
            workers = (json.loads(raw).get("workers") or []) if raw else []
            if any(w.get("worker_id") == self.worker_id for w in workers):
                progress("second echo worker is in the registry snapshot")
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"the second echo worker never reached the snapshot; log: "
                         f"{Path(self._log.name).read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            progress(f"second echo worker (pid {self.proc.pid}) stopped")
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)


def submit_all(api: Api, jobs: int, concurrency: int) -> list[Sent]:
    sent: list[Sent] = []

    def one(i: int) -> Sent:
        return api.submit({"topic": "job.echo", "prompt": f"sustained {i}",
                           "labels": {"bench": "sustained"}})

    with ThreadPoolExecutor(concurrency) as pool:
        for n, s in enumerate(pool.map(one, range(jobs)), 1):
            sent.append(s)
            if n % 500 == 0:
                progress(f"sustained: {n:,}/{jobs:,} submitted")
    return sent


def memory_per_job(store: Jobs, ids: list[str]) -> tuple[list[float], dict[str, float]]:
    """Bytes per stored job in five samples of 40 jobs, and the mean by key kind."""
    r = store.redis
    index_bytes = (r.memory_usage("job:index:succeeded", samples=0) or 0) / max(
        1, r.zcard("job:index:succeeded"))
    rnd = random.Random(11)
    sample = rnd.sample(ids, min(200, len(ids)))
    kinds = ("job:meta:", "job:req:", "job:events:", "ctx:", "res:")
    per_kind: dict[str, list[int]] = {k: [] for k in (*kinds, "trace:")}
    totals: list[float] = []
    for job_id in sample:
        total = index_bytes
        for kind in kinds:
            used = r.memory_usage(f"{kind}{job_id}", samples=0) or 0
            per_kind[kind].append(used)
            total += used
        trace = r.hget(f"job:meta:{job_id}", "trace_id")
        used = (r.memory_usage(f"trace:{trace}", samples=0) or 0) if trace else 0
        per_kind["trace:"].append(used)
        totals.append(total + used)
    chunks = [totals[i::5] for i in range(5)]
    means = [sum(c) / len(c) for c in chunks if c]
    breakdown = {k: sum(v) / len(v) for k, v in per_kind.items() if v}
    breakdown["index entry"] = index_bytes
    return means, breakdown


def measure(jobs: int, concurrency: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = stack_env()
    api, store = Api(env), Jobs(env["REDIS_URL"])
    taps = NatsTaps(env["NATS_URL"])
    worker = SecondWorker(env)
    worker.start(store)
    taps.start()
    used_before = int(store.redis.info("memory")["used_memory"])
    try:
        started = time.time()
        sent = submit_all(api, jobs, concurrency)
        submitted = time.time()
        ids = [s.job_id for s in sent]
        states = store.wait_terminal(ids, 180.0, "sustained")
        time.sleep(1.0)
    finally:
        taps.stop()
        worker.stop()
    used_after = int(store.redis.info("memory")["used_memory"])
    events = store.events(ids)
    t = taps.taps

    lost = [j for j in ids if states.get(j) not in TERMINAL]
    unsuccessful = [j for j in ids if states.get(j) in TERMINAL and states[j] != "SUCCEEDED"]
    reasons: dict[str, int] = {}
    for j in unsuccessful:
        reason = store.redis.hget(f"job:meta:{j}", "failure_reason") or states[j]
        reason = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", reason)
        reasons[reason] = reasons.get(reason, 0) + 1
    twice_events = [j for j in ids if len(events.get(j, {}).get("DISPATCHED", [])) > 1]
    twice_bus = [j for j in ids if t.dispatches.get(j, 0) > 1]
    by_worker: dict[str, int] = {}
    for j in ids:
        w = t.dispatched_to.get(j, "?")
        by_worker[w] = by_worker.get(w, 0) + 1
    done_at = sorted(max(ts for seen in ev.values() for ts in seen)
                     for j, ev in events.items() if states.get(j) in TERMINAL and ev)
    elapsed = (done_at[-1] - started) if done_at else float("nan")
    size = max(1, len(done_at) // SLICES)
    rates, prev = [], started
    for i in range(size - 1, size * SLICES, size):
        if i < len(done_at):
            rates.append(size / max(1e-6, done_at[i] - prev))
            prev = done_at[i]
    mem_runs, breakdown = memory_per_job(store, ids)
    figures = [
        figure("sustained_throughput", f"sustained throughput, {jobs:,} jobs, 2 echo workers "
               "(submit to terminal)", "jobs/s", rates,
               note=f"whole run: {len(done_at) / elapsed:.1f} jobs/s over {elapsed:.0f} s"),
        figure("sustained_submit_rate", "  HTTP submits accepted", "jobs/s",
               [jobs / (submitted - started)]),
        figure("sustained_lost", "jobs lost (not terminal)", "jobs", [len(lost)],
               budget="0", budget_value=0.0),
        figure("sustained_unsuccessful", "jobs terminal but not SUCCEEDED", "jobs",
               [len(unsuccessful)], note="; ".join(f"{n} x {r}" for r, n in sorted(
                   reasons.items(), key=lambda kv: -kv[1])[:3])),
        figure("sustained_twice", "jobs dispatched twice (event log / worker subjects)", "jobs",
               [max(len(twice_events), len(twice_bus))], budget="0", budget_value=0.0),
        figure("memory_per_job", "Redis memory per stored job (keys + index entry)", "bytes",
               mem_runs, note=f"used_memory grew {(used_after - used_before) / jobs:,.0f} "
                              "bytes per job over the run (shared Redis)"),
    ]
    info = {"jobs": jobs, "concurrency": concurrency, "seconds": elapsed,
            "submit_seconds": submitted - started, "lost": lost[:20],
            "states": {s: sum(1 for v in states.values() if v == s) for s in set(states.values())},
            "failure_reasons": reasons,
            "dispatched_twice_events": twice_events[:20], "dispatched_twice_bus": twice_bus[:20],
            "by_worker": by_worker, "memory_breakdown": breakdown,
            "used_memory_delta_per_job": (used_after - used_before) / jobs,
            "throughput_slices": summary(rates)}
    if os.environ.get("BENCH_KEEP_JOBS") != "1":
        store.remove(ids, api.tenant)
    return figures, info


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=env_int("BENCH_SUSTAINED_JOBS", 10_000))
    parser.add_argument("--concurrency", type=int,
                        default=env_int("BENCH_SUSTAINED_CONCURRENCY", 8))
    args = parser.parse_args(argv)
    figures, info = measure(args.jobs, args.concurrency)
    print(f"  states: {info['states']}; dispatched by worker: {info['by_worker']}")
    print("  memory by key kind (bytes): "
          + ", ".join(f"{k} {v:,.0f}" for k, v in info["memory_breakdown"].items()))
    emit(args.json, figures, info)


if __name__ == "__main__":
    main()
