"""Dispatch latency through the local stack: HTTP 200 to the worker receiving the
job, split by hop, over BENCH_LATENCY_JOBS echo jobs (default 1,000) submitted
at a steady BENCH_LATENCY_RATE per second (default 5); and end-to-end, submit
to SUCCEEDED.

Per job, on one clock (see stack_probe):

    t_send ------ HTTP ------ t_200                       client
       PENDING (gateway function, job:events)
       t_bus: the packet on sys.job.submit                 tap
       t_ack: the bridge acks it, SQS holds it             tap on $JS.ACK
       SCHEDULED (submit function, after lock + safety check)
       t_worker: the packet on worker.<id>.jobs            tap
       SUCCEEDED (result function)

Our own hops, as the budget counts them (p50 <= 30 ms summed): the gateway
handler (the executor's REPORT Duration of each gateway invocation), the
bridge's own work (its forward, stored -> acked, minus the SendMessageBatch
call that carried the job), and the submit function from receipt to worker
publish (its own ``dispatch_latency`` metric).

Reported apart, as the emulator's: its queue (SQS, LocalStack's poller, the
invoke), and the time LocalStack takes to answer the bridge's SendMessageBatch.
That call is timed inside the bridge (``BRIDGE_SQS_CALL_LOG=1``, one log line per
call, see ``cordum.bus.sqs``) and stands beside its floor, measured in the same
run: the same call with the same number of entries of the same shape, made by a
bare boto3 client against the same endpoint (``tests.bench.sqs_floor``, a process
of its own, beside the load), at the same moment: each floor call starts when a
job's packet appears on sys.job.submit, as the bridge's does (the emulator is then
still busy with that job's gateway invocation; a call at a random moment costs a
third as much and would not be the same work). When our call's p50 is more than
1.5 x the floor's, the excess (our p50 minus the floor's) counts against us: it is
added to the own hops' sum. The floor's process also makes the same calls through
our client alone, on an idle event loop (a reference: the client's cost without
the bridge around it). A bridge started without the call log leaves only the Redis
claim -> settle window around the call (MONITOR), an upper bound of it; the report
says which was used.

Each hop's figure is the percentile over all jobs (over all calls for the SQS
call and its floor); the spread is that percentile in each of five consecutive
slices of the run. Run:

    python -m tests.bench.bench_dispatch
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.bench.common import (
    ROOT,
    cli,
    emit,
    env_float,
    env_int,
    figure,
    local_env_path,
    percentile,
    progress,
    summary,
)
from tests.bench.stack_probe import (
    Api,
    BridgeMonitor,
    Jobs,
    LogWindow,
    NatsTaps,
    Sent,
    SqsCall,
    emf_values,
    match_acks,
    report_durations,
    sqs_calls,
    stack_env,
)

SLICES = 5
EXCESS_RULE = 1.5
"""Our SQS call's p50 may be this many times its floor's before the excess counts."""


def submit_steady(api: Api, jobs: int, rate: float) -> list[Sent]:
    """Open loop: job i leaves at start + i / rate, whatever the earlier ones do."""
    start = time.monotonic() + 0.2
    sent: list[Sent] = []

    def one(i: int) -> Sent:
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return api.submit({"topic": "job.echo", "prompt": f"latency {i}",
                           "labels": {"bench": "dispatch"}})

    with ThreadPoolExecutor(8) as pool:
        for n, s in enumerate(pool.map(one, range(jobs)), 1):
            sent.append(s)
            if n % 100 == 0:
                progress(f"latency: {n:,}/{jobs:,} submitted")
    return sent


def submit_queue_url() -> str:
    outputs = json.loads((local_env_path().parent / "cdk-outputs.json").read_text())
    return str(next(iter(outputs.values()))["SubmitQueueUrl"])


class SqsFloor:
    """``tests.bench.sqs_floor`` in a process of its own: bare boto3 SendMessageBatch calls."""

    def __init__(self, env: dict[str, str], like_queue: str) -> None:
        self.base = [sys.executable, "-m", "tests.bench.sqs_floor",
                     "--endpoint", env["LOCALSTACK_URL"], "--like", like_queue]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"),
                                                                 str(ROOT)])}
        self.nats = env["NATS_URL"]
        self.proc: subprocess.Popen[str] | None = None

    def start(self, batch: int, interval: float) -> None:
        """Calls until ``stop``; the entries carry the first packet on sys.job.submit."""
        argv = [*self.base, "--batch", str(batch), "--interval", str(interval),
                "--nats", self.nats, "--on-packet"]
        self.proc = subprocess.Popen(argv, env=self.env, cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        progress(f"SQS floor (bare boto3, {batch} entries per call) started, "
                 f"pid {self.proc.pid}")

    def stop(self) -> dict[str, Any] | None:
        if self.proc is None:
            return None
        try:
            out, _ = self.proc.communicate(timeout=120)  # closes stdin: the floor stops
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None
        return json.loads(out) if self.proc.returncode == 0 and out.strip() else None

    def once(self, batch: int, calls: int, packet_b64: str) -> dict[str, Any] | None:
        """``calls`` calls now, with ``batch`` entries of the given packet."""
        argv = [*self.base, "--batch", str(batch), "--calls", str(calls), "--interval", "0.1"]
        if packet_b64:
            argv += ["--packet-b64", packet_b64]
        proc = subprocess.run(argv, env=self.env, cwd=ROOT, text=True, capture_output=True,
                              timeout=300, check=False)
        if proc.returncode != 0:
            progress(f"SQS floor failed: {proc.stderr[-500:]}")
            return None
        return json.loads(proc.stdout)


def excess_ms(ours: float, floor: float) -> float:
    """What our SQS call's p50 adds to the own hops: nothing within EXCESS_RULE x the
    floor's p50, else all it takes over the floor."""
    return ours - floor if floor > 0 and ours > EXCESS_RULE * floor else 0.0


def slices(values: list[float], n: int = SLICES) -> list[list[float]]:
    size = max(1, len(values) // n)
    return [values[i:i + size] for i in range(0, size * n, size) if values[i:i + size]]


def hop_row(name: str, values_ms: list[float]) -> dict[str, Any]:
    """A hop's percentiles over all jobs and the spread of its p50 across slices."""
    per_slice = [percentile(s, 50) for s in slices(values_ms)]
    return {"hop": name, "n": len(values_ms), "p50": percentile(values_ms, 50),
            "p95": percentile(values_ms, 95), "p99": percentile(values_ms, 99),
            "p50_runs": per_slice}


def the_calls(bridge_text: str, queue: str, ids: set[str],
              guards: dict[str, dict[str, float]]) -> tuple[list[SqsCall], str]:
    """The bridge's SendMessageBatch calls that carried our jobs, and where they came from.

    From the bridge's call log when it wrote one; else from the Redis claim -> settle
    window around each call (``guards``: job id -> the MONITOR times of its stream
    message), which holds the call and a little of our own work besides."""
    calls = [c for c in sqs_calls(bridge_text, queue.rsplit("/", 1)[-1])
             if not ids.isdisjoint(c.job_ids)]
    if calls:
        return calls, "the bridge's call log (BRIDGE_SQS_CALL_LOG=1)"
    windows: dict[tuple[float, float], list[str]] = {}
    for job_id, g in guards.items():
        if "claim" in g and "settle" in g:
            windows.setdefault((g["claim"], g["settle"]), []).append(job_id)
    calls = [SqsCall(queue, len(jobs), claim, (settle - claim) * 1000, tuple(jobs))
             for (claim, settle), jobs in sorted(windows.items())]
    return calls, ("the Redis claim -> settle window around each call (MONITOR), an upper "
                   "bound: the bridge runs without BRIDGE_SQS_CALL_LOG=1")


def measure(jobs: int, rate: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = stack_env()
    api, store = Api(env), Jobs(env["REDIS_URL"])
    taps = NatsTaps(env["NATS_URL"])
    gateway_log, submit_log = LogWindow("gateway"), LogWindow("submit")
    bridge_log = LogWindow("bridge", pattern="bridge.log")
    queue = submit_queue_url()
    floor_batch = env_int("BENCH_SQS_FLOOR_BATCH", 1)
    floor = SqsFloor(env, queue)
    monitor = BridgeMonitor(env["REDIS_URL"])
    if os.environ.get("BENCH_BRIDGE_MONITOR", "1") != "0":
        monitor.start()
    taps.start()
    floor_interval = env_float("BENCH_SQS_FLOOR_INTERVAL", 0.5)
    floor_when = ("beside the load, each call started when a job's packet appeared on "
                  "sys.job.submit (every other packet; the others time our client alone), as "
                  "the bridge's call starts: the emulator is then still finishing that job's "
                  "gateway invocation, which a call at a random moment would miss")
    floor.start(floor_batch, floor_interval)
    try:
        started = time.monotonic()
        sent = submit_steady(api, jobs, rate)
        submit_s = time.monotonic() - started
        ids = [s.job_id for s in sent]
        states = store.wait_terminal(ids, 120.0, "latency")
        time.sleep(1.0)  # the taps' last callbacks
    finally:
        taps.stop()
        monitor.stop()
        floor_out = floor.stop()
    events = store.events(ids)
    acked = match_acks(taps.taps, sent)
    t = taps.taps

    guards = {job_id: monitor.seen.get(seq, {}) for job_id, (_, seq) in acked.items()}
    calls, calls_source = the_calls(bridge_log.text(), queue, set(ids), guards)
    call_of = {job_id: c for c in calls for job_id in c.job_ids}
    sizes = Counter(c.entries for c in calls)
    modal = sizes.most_common(1)[0][0] if sizes else floor_batch
    if floor_out is not None and modal != floor_out["batch"]:
        progress(f"the bridge sent mostly {modal} entries per call: the floor again at that size")
        floor_out = floor.once(modal, 100, floor_out.get("packet_b64", ""))
        floor_interval, floor_when = 0.1, "one call about every 0.1 s after the load"
    floor_ms = [ms for _, ms in floor_out["samples"]] if floor_out else []
    alone_ms = list(floor_out.get("ours_alone") or []) if floor_out else []
    same_size = [c.ms for c in calls if floor_out and c.entries == floor_out["batch"]]

    hops: dict[str, list[float]] = {k: [] for k in (
        "api", "gw_to_bus", "bridge", "bridge_pull", "bridge_sqs", "bridge_ack", "bridge_own",
        "queue", "submit_publish", "to_worker", "worker", "result_path", "e2e")}
    for s in sent:
        ev = events.get(s.job_id, {})
        hops["api"].append((s.t_200 - s.t_send) * 1000)
        bus, worker = t.submit.get(s.job_id), t.worker.get(s.job_id)
        ack, seq = acked.get(s.job_id, (None, -1))
        answered = t.result.get(s.job_id)
        guard = monitor.seen.get(seq, {})
        scheduled = (ev.get("SCHEDULED") or [None])[0]
        succeeded = (ev.get("SUCCEEDED") or [None])[0]
        pending = (ev.get("PENDING") or [None])[0]
        if bus is not None and pending is not None:
            hops["gw_to_bus"].append((bus - pending) * 1000)
        if bus is not None and ack is not None:
            hops["bridge"].append((ack - bus) * 1000)
            if "claim" in guard and "settle" in guard:
                hops["bridge_pull"].append((guard["claim"] - bus) * 1000)
                hops["bridge_sqs"].append((guard["settle"] - guard["claim"]) * 1000)
                hops["bridge_ack"].append((ack - guard["settle"]) * 1000)
            call = call_of.get(s.job_id)
            if call is not None:
                hops["bridge_own"].append((ack - bus) * 1000 - call.ms)
        if ack is not None and scheduled is not None:
            hops["queue"].append((scheduled - ack) * 1000)
        if scheduled is not None and worker is not None:
            hops["submit_publish"].append((worker - scheduled) * 1000)
        if worker is not None:
            hops["to_worker"].append((worker - s.t_200) * 1000)
        if worker is not None and answered is not None:
            hops["worker"].append((answered - worker) * 1000)
        if answered is not None and succeeded is not None:
            hops["result_path"].append((succeeded - answered) * 1000)
        if succeeded is not None:
            hops["e2e"].append((succeeded - s.t_send) * 1000)
    hops["gateway"] = report_durations(gateway_log.text())
    hops["submit"] = emf_values(submit_log.text(), "dispatch_latency", topic="job.echo")
    hops["sqs_call"] = [c.ms for c in calls]
    hops["sqs_floor"] = floor_ms
    hops["sqs_alone"] = alone_ms

    batch = floor_out["batch"] if floor_out else modal
    labels = {
        "api": "API: HTTP request to 200 (LocalStack API Gateway + gateway λ)",
        "gateway": "  gateway handler (λ REPORT Duration) [own]",
        "gw_to_bus": "  gateway: PENDING written to packet on sys.job.submit",
        "bridge": "bridge forward: stored in JetStream to acked (own work + SQS call)",
        "bridge_pull": "  bridge: packet stored to claim script run (pull, decode)",
        "bridge_sqs": "  bridge: claim to settle script (around the SQS call)",
        "sqs_call": "    bridge: SendMessageBatch, our client, per call [emulator, apart]",
        "sqs_floor": f"    SendMessageBatch floor: bare boto3, same endpoint, {batch} "
                     f"entr{'y' if batch == 1 else 'ies'}, per call",
        "sqs_alone": "    SendMessageBatch, our client alone in the floor's process, per call",
        "bridge_ack": "  bridge: settle to JetStream ack",
        "bridge_own": "  bridge's own work: forward minus its SendMessageBatch [own]",
        "queue": "queue: bridge ack to SCHEDULED (SQS, LocalStack poll, invoke, lock, "
                 "safety check) [emulator]",
        "submit": "submit function: receipt to worker publish (dispatch_latency) [own]",
        "submit_publish": "  submit function: SCHEDULED to the worker's subject",
        "to_worker": "HTTP 200 to the worker receiving the job",
        "worker": "echo worker: receipt to result on sys.job.result",
        "result_path": "result path: sys.job.result to SUCCEEDED (bridge, SQS, poll, result λ)",
        "e2e": "end to end: submit to SUCCEEDED (echo job)",
    }
    row = {key: hop_row(label, hops[key]) for key, label in labels.items()}

    # The excess rule, on the calls of the floor's batch size, with the figures the
    # table shows: the median over the slices of each side's p50.
    ours_runs = [percentile(part, 50) for part in slices(same_size)]
    floor_runs = [percentile(part, 50) for part in slices(floor_ms)]
    measured_floor = bool(ours_runs and floor_runs)
    ours_p50, floor_p50 = summary(ours_runs)["median"], summary(floor_runs)["median"]
    excess = excess_ms(ours_p50, floor_p50) if measured_floor else 0.0
    excess_runs = ([excess_ms(o, floor_p50) for o in ours_runs] if measured_floor
                   else [0.0] * SLICES)
    own = (row["gateway"], row["bridge_own"], row["submit"])
    own_runs = [sum(parts) for parts in zip(*(r["p50_runs"] for r in own), excess_runs,
                                            strict=False)]
    # Over all jobs and calls at once (the notes).
    all_excess = (excess_ms(percentile(same_size, 50), percentile(floor_ms, 50))
                  if measured_floor else 0.0)
    own_p50 = sum(r["p50"] for r in own) + all_excess
    ratio = ours_p50 / floor_p50 if measured_floor and floor_p50 else None
    within = ratio is not None and ratio <= EXCESS_RULE
    rule = (f"our p50 {ours_p50:.1f} ms is ×{ratio:.2f} the floor's {floor_p50:.1f} ms: "
            + ("within 1.5×, nothing counted" if within
               else f"over 1.5×, {excess:.1f} ms counted in the own hops")
            if ratio is not None else "no floor measured: excess rule not applied")

    def part(fid: str, key: str, label: str) -> dict[str, Any]:
        return figure(fid, label, "ms", row[key]["p50_runs"],
                      note=f"p99 {row[key]['p99']:.1f} ms; over all: p50 {row[key]['p50']:.1f} "
                           f"ms (n={row[key]['n']})")

    entries = f"{batch} entr{'y' if batch == 1 else 'ies'}"
    sqs_fig = figure("bridge_sqs_call_p50", f"  the bridge's SQS call (SendMessageBatch, "
                     f"{entries}, our client), p50 (reported apart)", "ms", ours_runs,
                     budget="<= 1.5 × floor p50, else the excess counts", floor=floor_runs,
                     note=f"over all calls: p50 {percentile(same_size, 50):.1f} ms, p99 "
                          f"{percentile(same_size, 99):.1f} ms (n={len(same_size)}); "
                          f"timed by {calls_source}")
    if ratio is not None:
        sqs_fig["verdict"] = "met" if within else "not met"
    figures = [
        figure("dispatch_own_p50", "dispatch latency of our own hops, p50 summed (gateway "
               "handler + bridge's own work + submit receipt->publish + SQS call excess)", "ms",
               own_runs or [own_p50], budget="p50 <= 30 ms summed", budget_value=30.0,
               note=f"over all jobs: {row['gateway']['p50']:.1f} + {row['bridge_own']['p50']:.1f}"
                    f" + {row['submit']['p50']:.1f} + {all_excess:.1f} = {own_p50:.1f} ms"),
        part("dispatch_gateway_p50", "gateway", "  gateway handler (λ REPORT Duration), p50"),
        part("dispatch_bridge_own_p50", "bridge_own",
             "  bridge's own work (forward minus its SendMessageBatch), p50"),
        part("dispatch_submit_p50", "submit", "  submit function, receipt to worker publish, p50"),
        figure("dispatch_sqs_excess", "  SQS call excess counted in the own hops (our p50 minus "
               "the floor's, when over 1.5 × the floor's)", "ms", excess_runs, note=rule),
        sqs_fig,
        figure("bridge_sqs_floor_p50", f"  its floor: the same call from a bare boto3 client, "
               f"same endpoint, {entries}, p50", "ms", floor_runs,
               note=f"over all calls: p50 {percentile(floor_ms, 50):.1f} ms, p99 "
                    f"{percentile(floor_ms, 99):.1f} ms (n={len(floor_ms)})"),
        figure("dispatch_emulator_p50", "  the emulator's queue hop, p50 (reported apart)", "ms",
               row["queue"]["p50_runs"]),
    ]
    for key, fid, label in (("to_worker", "dispatch_200_to_worker", "HTTP 200 to worker receipt"),
                            ("e2e", "e2e", "end to end, submit to SUCCEEDED (echo)")):
        for p in (50, 95, 99):
            runs = [percentile(part, p) for part in slices(hops[key])]
            figures.append(figure(f"{fid}_p{p}", f"{label}, p{p}", "ms", runs,
                                  note=f"over all jobs: {row[key][f'p{p}']:.0f} ms"))
    not_succeeded = sum(1 for s in states.values() if s != "SUCCEEDED")
    others = Counter(s or "unknown" for s in states.values() if s != "SUCCEEDED")
    measured = [row[k] for k in ("gateway", "gw_to_bus", "bridge_pull", "bridge_own", "sqs_call",
                                 "bridge_ack", "queue", "submit") if row[k]["n"]]
    info = {"jobs": jobs, "rate": rate, "submit_seconds": submit_s, "hops": list(row.values()),
            "not_succeeded": not_succeeded, "not_succeeded_states": dict(others),
            "acks_matched": len(acked),
            "bridge_split": len(hops["bridge_sqs"]),
            "worker_seen": sum(1 for s in sent if s.job_id in t.worker),
            "slowest_hop": max(measured, key=lambda r: r["p50"])["hop"].strip(),
            "sqs": {"source": calls_source, "calls": len(calls),
                    "batch_sizes": dict(sorted(sizes.items())), "compared_calls": len(same_size),
                    "batch": batch, "floor_interval": floor_interval, "floor_when": floor_when,
                    "ours_p50": ours_p50, "floor_p50": floor_p50,
                    "ours_p50_all": percentile(same_size, 50),
                    "ours_p99_all": percentile(same_size, 99),
                    "floor_p50_all": percentile(floor_ms, 50),
                    "floor_p99_all": percentile(floor_ms, 99), "floor_calls": len(floor_ms),
                    "alone_p50_all": percentile(alone_ms, 50),
                    "alone_p99_all": percentile(alone_ms, 99), "alone_calls": len(alone_ms),
                    "ratio": ratio, "rule": EXCESS_RULE, "excess_ms": excess,
                    "excess_ms_all": all_excess,
                    "over_rule_ms": (ours_p50 - EXCESS_RULE * floor_p50) if measured_floor
                    else None,
                    "floor": {k: v for k, v in (floor_out or {}).items()
                              if k not in ("samples", "ours_alone", "packet_b64")}},
            "own_p50_ms": own_p50}
    store.remove(ids, api.tenant)
    return figures, info


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=env_int("BENCH_LATENCY_JOBS", 1000))
    parser.add_argument("--rate", type=float, default=env_float("BENCH_LATENCY_RATE", 5.0))
    args = parser.parse_args(argv)
    figures, info = measure(args.jobs, args.rate)
    for row in info["hops"]:
        print(f"  {row['hop']}: p50 {row['p50']:.1f} ms, p95 {row['p95']:.1f}, "
              f"p99 {row['p99']:.1f} (n={row['n']})")
    print(f"  SQS call: {json.dumps(info['sqs'], default=str)}")
    emit(args.json, figures, info)


if __name__ == "__main__":
    main()
