"""``make chaos``: the whole local stack under a steady load while parts of it break.

It starts a Redis (with an AOF, fsync on every write) and a NATS with JetStream of its
own on free ports, never the machine's shared ones, and brings the local stack up on
them (LocalStack, the CDK app, the supervised kernel, bridge and echo worker). A
baseline comes first; then each fault of :mod:`chaos_faults` in turn: jobs go in
over the REST API at ``--rate`` per second, the fault is injected, the load goes on
for a while, and every accepted job is followed until it ends (or the wait runs out);
one tick in eight starts a workflow run (a for_each over two echo items) instead.
Each fault writes one row of RELIABILITY.md: jobs accepted, how they ended, jobs that
reached a worker twice (the echo worker's receipts file), accepted jobs the store
lost, the time to the first success after the fault, and what clients saw.

The stack's config is a copy of ``config/`` with shorter reconciler timeouts (a job
left RUNNING by a killed worker times out after 200 s instead of 15 minutes; PENDING
jobs are re-driven after 30 s), so a run ends in about a quarter of an hour. Like
``make bench`` it is not part of ``make test``. The echo worker runs 16 jobs at once
(``WORKER_SLOTS``) so that no row's load outgrows it.

    python localstack/chaos.py [--rate 4] [--faults redis-pause,bridge-kill] [--out F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "localstack"), str(ROOT / "infra" / "cdk"), str(ROOT / "shared")]

import chaos_faults  # noqa: E402
import chaos_load  # noqa: E402
import chaos_report  # noqa: E402
import stack  # noqa: E402
from services import STATE, ensure_binary, fail, step  # noqa: E402

CHAOS = STATE / "chaos"
RECEIPTS = CHAOS / "receipts.txt"
WARMUP_S = 5.0
AFTER_S = 15.0
"""Load after the fault; the kernel faults get LONG_AFTER_S: the gateway's circuit
breaker, opened by the failed checks, waits 1 s before it probes again, doubling per
failed probe up to 30 s, so a kernel down for long is seen back up to 30 s late."""
LONG_AFTER_S = 40.0
SETTLE_S = 150.0
"""How long accepted jobs may take to end after the load stops."""
LONG_SETTLE_S = 300.0
"""For the faults that lose a Lambda's batch or a job on its way to a worker: the batch
comes back after the queue's visibility timeout (6 x 30 s), a job that never reached
(or outlived) its worker times out after the running timeout below."""
FIRST_LOOK_S = 60.0
"""How long a fault's jobs are waited for before the next fault goes in; what is still
open then is looked at again after each later fault, up to its own wait."""
SLOW_TO_END = frozenset({"nats-restart", "worker-kill", "lambda-kill", "all-together"})
"""Faults whose jobs may wait for a timeout or a redelivery: a direct dispatch lost in
a NATS restart, a dead worker's jobs, a killed Lambda's batch."""
KERNEL_FAULTS = frozenset({"kernel-kill", "kernel-slow", "all-together"})
WORKFLOW_ID = "chaos-fan"
WORKER_SLOTS = 16
"""The echo worker's parallel jobs (4 as shipped). The worker-kill row's jobs sleep 3 s
at 4 per second, 12 at a time: with 4 slots they would queue behind the worker whether
or not it was killed, and the row would time the queue, not the recovery."""
RECONCILER = {"dispatch_timeout_seconds": 30, "running_timeout_seconds": 200,
              "scan_interval_seconds": 10}
"""The running timeout stays above the result queue's 180 s visibility timeout, as the
shipped 900 s does, so a result redelivered after a killed Lambda still counts."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def private_servers() -> tuple[chaos_faults.Server, chaos_faults.Server]:
    for name in ("redis", "nats"):
        shutil.rmtree(CHAOS / name, ignore_errors=True)
        (CHAOS / name).mkdir(parents=True)
    redis_port, nats_port = free_port(), free_port()
    redis = chaos_faults.Server("redis", [
        ensure_binary("redis-server", "redis-server"), "--bind", "127.0.0.1",
        "--port", str(redis_port), "--save", "", "--appendonly", "yes",
        "--appendfsync", "always", "--dir", str(CHAOS / "redis")],
        redis_port, CHAOS / "redis.log")
    nats = chaos_faults.Server("nats", [
        ensure_binary("nats-server", "nats-server"), "-a", "127.0.0.1", "-p", str(nats_port),
        "-js", "-sd", str(CHAOS / "nats")], nats_port, CHAOS / "nats.log")
    return redis, nats


def chaos_config() -> Path:
    """``config/`` copied, with the reconciler's timeouts made short."""
    import yaml

    target = CHAOS / "config"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ROOT / "config", target)
    path = target / "timeouts.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    doc["reconciler"] = {**(doc.get("reconciler") or {}), **RECONCILER}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def read_outputs() -> dict[str, str]:
    """The CDK outputs ``make up`` wrote (the queue URLs among them)."""
    import json

    import deploy  # infra/cdk/deploy.py

    doc = json.loads(stack.OUTPUTS.read_text())
    return dict(doc.get(deploy.STACK_NAME, {}))


def child_pid(name: str) -> int:
    """The current process of a supervised service (its supervisor's state file)."""
    import supervisor

    state = supervisor.read_state(name)
    pid = state.child_pid if state is not None else None
    return pid if pid and chaos_faults.alive(pid) else 0


@dataclass
class Trial:
    """One fault's load, waiting for its jobs to end."""

    name: str
    load: chaos_load.Load
    extra: list[str]
    fault_at: float
    receipts_from: int
    notes: list[str]
    ends_by: float
    """When its jobs have had long enough (the wait runs past later faults)."""

    @property
    def job_ids(self) -> list[str]:
        return [s.job_id for s in self.load.accepted()] + self.extra


def run_fault(name: str, target: chaos_faults.Target, rate: float) -> Trial:
    """The load, the fault, more load; the jobs are left to end (see :func:`finish`)."""
    fault, _ = chaos_faults.FAULTS.get(name, (None, ""))
    target.notes = []
    before = chaos_load.line_count(RECEIPTS)
    tag = f"{name}-{uuid.uuid4().hex[:6]}"
    load = chaos_load.Load(target.values["CORDUM_API_URL"], target.values["CORDUM_API_KEY"],
                           stack.TENANT, rate, tag,
                           sleep_ms=3000 if name == "worker-kill" else 200,
                           workflow_id=WORKFLOW_ID)
    load.start()
    time.sleep(WARMUP_S)
    fault_at = time.time()
    extra: list[str] = []
    try:
        if fault is not None:
            step(f"{name}: injecting")
            extra = fault(target)
    finally:
        time.sleep(LONG_AFTER_S if name in KERNEL_FAULTS else AFTER_S)
        load.stop()
    wait = LONG_SETTLE_S if name in SLOW_TO_END else SETTLE_S
    trial = Trial(name, load, extra, fault_at, before, list(target.notes), time.time() + wait)
    step(f"{name}: {len(trial.job_ids)} jobs and {len(load.accepted_runs())} runs accepted")
    return trial


def finish(trial: Trial, target: chaos_faults.Target, *, until: float) -> chaos_load.Row | None:
    """The trial's row once its jobs and runs ended (waiting at most until ``until``, a
    ``time.time()`` instant); None while some are still open and it may wait longer."""
    ends, run_ends = chaos_load.settle(
        target.redis_client, trial.job_ids, max(0.0, until - time.time()),
        progress=lambda text: step(f"{trial.name}: {text}"),
        run_ids=trial.load.accepted_runs())
    row = chaos_load.account(trial.name, trial.load, trial.extra, ends,
                             chaos_load.receipts(RECEIPTS, trial.receipts_from),
                             trial.fault_at, run_ends)
    open_jobs, open_runs = sum(row.still_open.values()), row.runs.get("open", 0)
    if (open_jobs or open_runs) and time.time() < trial.ends_by:
        step(f"{trial.name}: {open_jobs} jobs and {open_runs} runs still open; "
             "looked at again after the next faults")
        return None
    row.notes = list(trial.notes)
    if row.slowest_job and row.slowest_s is not None:
        row.notes.append(f"slowest job {row.slowest_job} ({row.slowest_s:.1f} s), states "
                         "from the fault: " + chaos_load.timeline(
                             target.redis_client, row.slowest_job, trial.fault_at))
    step(f"{trial.name}: {row.succeeded}/{row.accepted} succeeded, "
         f"{sum(row.still_open.values())} open, {row.twice} twice, {row.lost} lost, "
         f"client saw {row.client_saw}")
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=4.0, help="jobs per second (4)")
    parser.add_argument("--faults", default=",".join(chaos_faults.FAULTS),
                        help="comma-separated, from: " + ", ".join(chaos_faults.FAULTS))
    parser.add_argument("--out", default=str(ROOT / "RELIABILITY.md"))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in chaos_faults.FAULTS]
    if unknown:
        fail(f"unknown fault(s): {', '.join(unknown)}")
    if stack.launcher.is_running():
        fail("the local stack is running: `make down` first (chaos brings up its own)")

    import redis as redis_lib

    started = time.monotonic()
    redis, nats = private_servers()
    redis.start()
    nats.start()
    step(f"private Redis on {redis.port} (AOF), NATS on {nats.port} (JetStream)")
    RECEIPTS.unlink(missing_ok=True)
    os.environ.update(REDIS_URL=f"redis://127.0.0.1:{redis.port}",
                      NATS_URL=f"nats://127.0.0.1:{nats.port}",
                      CORDUM_CONFIG_DIR=str(chaos_config()),
                      WORKER_RECEIPTS_PATH=str(RECEIPTS), WORKER_MAX_PARALLEL=str(WORKER_SLOTS))
    rows: list[chaos_load.Row] = []
    try:
        values = stack.up(run_demo=False)
        outputs = read_outputs()
        client = redis_lib.Redis.from_url(values["REDIS_URL"], socket_timeout=5,
                                          socket_connect_timeout=5)
        target = chaos_faults.Target(redis, nats, values, outputs, child_pid, client)
        status, body = stack.http("POST", f"{values['CORDUM_API_URL']}/api/v1/workflows",
                                  values["CORDUM_API_KEY"],
                                  {"id": WORKFLOW_ID, **chaos_load.WORKFLOW})
        if status != 201:
            fail(f"saving the load's workflow answered {status}: {body}")
        order = ["baseline", *names]
        waiting: list[Trial] = []
        for name in order:
            trial = run_fault(name, target, args.rate)
            row = finish(trial, target, until=time.time() + FIRST_LOOK_S)
            if row is None:
                waiting.append(trial)
            else:
                rows.append(row)
            for earlier in [t for t in waiting if t is not trial]:
                row = finish(earlier, target, until=time.time())
                if row is not None:
                    waiting.remove(earlier)
                    rows.append(row)
        for trial in waiting:
            row = finish(trial, target, until=trial.ends_by)
            assert row is not None
            rows.append(row)
        rows.sort(key=lambda r: order.index(r.fault))
        chaos_report.write(Path(args.out), rows, rate=args.rate,
                           minutes=(time.monotonic() - started) / 60)
    finally:
        stack.down()
        nats.stop()
        redis.stop()
    step(f"wrote {args.out} ({(time.monotonic() - started) / 60:.1f} min)")
    if any(not r.clean for r in rows if r.fault not in chaos_report.KNOWN_LIMITS):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
