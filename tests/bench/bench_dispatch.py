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

Our own hops, as the budget counts them: the gateway handler (the executor's
REPORT Duration of each gateway invocation), the bridge forward (stored ->
acked), and the submit function from receipt to worker publish (its own
``dispatch_latency`` metric). The emulator's queue (SQS, LocalStack's poller,
the invoke) is reported apart. Each hop's figure is the percentile over all
jobs; the spread is that percentile in each of five consecutive slices of the
run. Run:

    python -m tests.bench.bench_dispatch
"""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.bench.common import (
    cli,
    emit,
    env_float,
    env_int,
    figure,
    local_env_path,
    percentile,
    progress,
)
from tests.bench.stack_probe import (
    Api,
    BridgeMonitor,
    Jobs,
    LogWindow,
    NatsTaps,
    Sent,
    emf_values,
    match_acks,
    report_durations,
    stack_env,
)

SLICES = 5


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


def sqs_call_ms(env: dict[str, str], calls: int) -> list[float]:
    """One SQS API call to LocalStack, read-only (GetQueueAttributes on the submit
    queue), made by the bridge's own SQS client: the least a bridge forward can
    cost, since it makes one such call."""
    import asyncio
    import json

    from botocore.credentials import Credentials

    from cordum.bus.sqs import SqsClient

    outputs = json.loads((local_env_path().parent / "cdk-outputs.json").read_text())
    queue = next(iter(outputs.values()))["SubmitQueueUrl"]
    params = {"QueueUrl": queue, "AttributeNames": ["QueueArn"]}

    async def measure() -> list[float]:
        sqs = SqsClient(env["LOCALSTACK_URL"], "us-east-1", Credentials("test", "test"))
        await sqs.call("GetQueueAttributes", params)  # open the connection
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await sqs.call("GetQueueAttributes", params)
            out.append((time.perf_counter() - t0) * 1000)
        await sqs.close()
        return out

    return asyncio.run(measure())


def slices(values: list[float], n: int = SLICES) -> list[list[float]]:
    size = max(1, len(values) // n)
    return [values[i:i + size] for i in range(0, size * n, size) if values[i:i + size]]


def hop_row(name: str, values_ms: list[float]) -> dict[str, Any]:
    """A hop's percentiles over all jobs and the spread of its p50 across slices."""
    per_slice = [percentile(s, 50) for s in slices(values_ms)]
    return {"hop": name, "n": len(values_ms), "p50": percentile(values_ms, 50),
            "p95": percentile(values_ms, 95), "p99": percentile(values_ms, 99),
            "p50_runs": per_slice}


def measure(jobs: int, rate: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = stack_env()
    api, store = Api(env), Jobs(env["REDIS_URL"])
    taps = NatsTaps(env["NATS_URL"])
    gateway_log, submit_log = LogWindow("gateway"), LogWindow("submit")
    sqs_floor = sqs_call_ms(env, 25)
    monitor = BridgeMonitor(env["REDIS_URL"])
    if os.environ.get("BENCH_BRIDGE_MONITOR", "1") != "0":
        monitor.start()
    taps.start()
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
    sqs_floor += sqs_call_ms(env, 25)
    events = store.events(ids)
    acked = match_acks(taps.taps, sent)
    t = taps.taps

    hops: dict[str, list[float]] = {k: [] for k in (
        "api", "gw_to_bus", "bridge", "bridge_pull", "bridge_sqs", "bridge_ack", "queue",
        "submit_publish", "to_worker", "worker", "result_path", "e2e")}
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
    gateway_ms = report_durations(gateway_log.text())
    submit_own = emf_values(submit_log.text(), "dispatch_latency", topic="job.echo")

    labels = {
        "api": "API: HTTP request to 200 (LocalStack API Gateway + gateway λ)",
        "gateway": "  gateway handler (λ REPORT Duration) [own]",
        "gw_to_bus": "  gateway: PENDING written to packet on sys.job.submit",
        "bridge": "bridge forward: stored in JetStream to acked (SQS accepted) [own]",
        "bridge_pull": "  bridge: packet stored to claim script run (pull, decode)",
        "bridge_sqs": "  bridge: claim to settle script (SQS SendMessageBatch)",
        "bridge_ack": "  bridge: settle to JetStream ack",
        "queue": "queue: bridge ack to SCHEDULED (SQS, LocalStack poll, invoke, lock, "
                 "safety check) [emulator]",
        "submit": "submit function: receipt to worker publish (dispatch_latency) [own]",
        "submit_publish": "  submit function: SCHEDULED to the worker's subject",
        "to_worker": "HTTP 200 to the worker receiving the job",
        "worker": "echo worker: receipt to result on sys.job.result",
        "result_path": "result path: sys.job.result to SUCCEEDED (bridge, SQS, poll, result λ)",
        "e2e": "end to end: submit to SUCCEEDED (echo job)",
    }
    hops["gateway"], hops["submit"] = gateway_ms, submit_own
    row = {key: hop_row(label, hops[key]) for key, label in labels.items()}
    own = (row["gateway"], row["bridge"], row["submit"])
    own_runs = [sum(parts) for parts in zip(*(r["p50_runs"] for r in own), strict=False)]
    own_p50 = sum(r["p50"] for r in own)
    figures = [
        figure("dispatch_own_p50", "dispatch latency of our own hops, p50 summed (gateway "
               "handler + bridge forward + submit receipt->publish)", "ms", own_runs or [own_p50],
               budget="p50 <= 30 ms summed", budget_value=30.0,
               note=f"over all jobs: {own_p50:.1f} ms"),
        figure("bridge_forward_p50", "  bridge forward, p50", "ms", row["bridge"]["p50_runs"],
               floor=sqs_floor, note="floor: one SQS call to LocalStack, the bridge's client "
                                     "(GetQueueAttributes), same run"),
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
    measured = [row[k] for k in ("gateway", "gw_to_bus", "bridge_pull", "bridge_sqs",
                                 "bridge_ack", "queue", "submit") if row[k]["n"]]
    info = {"jobs": jobs, "rate": rate, "submit_seconds": submit_s, "hops": list(row.values()),
            "not_succeeded": not_succeeded, "not_succeeded_states": dict(others),
            "acks_matched": len(acked),
            "bridge_split": len(hops["bridge_sqs"]),
            "worker_seen": sum(1 for s in sent if s.job_id in t.worker),
            "slowest_hop": max(measured, key=lambda r: r["p50"])["hop"].strip()}
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
    emit(args.json, figures, info)


if __name__ == "__main__":
    main()
