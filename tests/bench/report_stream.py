"""BENCHMARKS.md's details of item 8, the live event stream: its setup, the service beside
the bare floor server, and what limited the events per second (kept apart from
:mod:`tests.bench.report` so that module stays short)."""

from __future__ import annotations

from typing import Any

from tests.bench.common import fmt


def bottleneck(side: dict[str, Any], cores: int) -> str:
    """What the throughput runs of one server ran into, from the CPU readings."""
    runs = side.get("runs") or []
    if not runs:
        return "no runs"
    server = sorted(r["service_cpu_pct"] for r in runs)[len(runs) // 2]
    clients = sorted(r["clients_cpu_pct"] for r in runs)[len(runs) // 2]
    machine = sorted(r["machine_busy_pct"] for r in runs)[len(runs) // 2]
    figures = (f"server process {server:.0f} % of a core, clients' process {clients:.0f} %, "
               f"machine {machine:.0f} % of {cores * 100} %")
    if server >= 95:
        return f"the server process's one core ({figures})"
    if machine >= 0.9 * cores * 100:
        return f"the machine's {cores} cores, shared by all the processes ({figures})"
    if clients >= 95:
        return f"the clients' process ({figures})"
    return f"nothing saturated ({figures})"


def stream_details(info: dict[str, Any]) -> list[str]:
    svc, flr = info["service"], info["floor"]
    cores = int(info.get("cores") or 1)
    sse = f", {info['sse']:,} of them Server-Sent Events" if info.get("sse") else ""
    lines = ["", f"Setup: {info['clients']:,} clients{sse} in one process of their own "
             f"(aiohttp; WebSockets that {'offer' if info['deflate'] else 'do not offer'} "
             "permessage-deflate, as browsers do), all of one tenant, "
             f"{info['keys']} keys × {info['per_key']} streams (the per-key bound as shipped); "
             "the service as deployed (`python -m cordum.stream`, its own process) on this "
             f"machine's Redis (a database of its own) and {info.get('nats', 'NATS')}. Each "
             "event is a `job.submit` BusPacket as the gateway publishes it for an API submit, "
             f"of a stored job: {info['frame_bytes']:,} bytes of protojson per frame. "
             f"Latency: {info['latency_events']} events at {info['latency_rate']:g}/s, publish "
             "time carried in the packet's traceId (`time.time_ns()`), read at each arrival; "
             "its floor a bare NATS subscriber in the clients' process. Throughput: "
             f"{info['runs']} runs of {info['events']} events, each published once at most "
             f"{info['window']} are not yet at every client. Memory: the service's VmRSS. The "
             "floor server: a bare aiohttp server writing one protojson text per event to "
             "every connection from its NATS callback (no log, no job meta, no per-client "
             f"queue), with the same clients ({flr['latency_events']} latency events).", ""]

    def pair(key: str, digits: int = 1) -> list[str]:
        return [fmt(svc[key], digits), fmt(flr[key], digits)]

    rows = [
        ["clients connected (seconds to connect all)",
         f"{svc['connected']:,} ({svc['connect_s']:.1f} s)",
         f"{flr['connected']:,} ({flr['connect_s']:.1f} s)"],
        ["RSS with 0 clients, MiB", *pair("rss_mib_0")],
        ["RSS with all connected and idle, MiB", *pair("rss_mib_idle")],
        ["RSS after the events, MiB", *pair("rss_mib_after")],
        ["RSS once every client left, MiB", *pair("rss_mib_closed")],
        ["KiB per idle connection", *pair("kib_per_conn_idle")],
        ["KiB per connection after the events", *pair("kib_per_conn_after")],
        ["latency p50 / p99, ms",
         f"{fmt(svc['latency_p50_ms'], 1)} / {fmt(svc['latency_p99_ms'], 1)}",
         f"{fmt(flr['latency_p50_ms'], 1)} / {fmt(flr['latency_p99_ms'], 1)}"],
        ["bare NATS subscriber p50 / p99, ms",
         f"{fmt(svc['floor_p50_ms'], 2)} / {fmt(svc['floor_p99_ms'], 2)}",
         f"{fmt(flr['floor_p50_ms'], 2)} / {fmt(flr['floor_p99_ms'], 2)}"],
        ["latency phase: server CPU %, clients' CPU %",
         f"{svc['latency_usage']['service_cpu_pct']:.0f}, "
         f"{svc['latency_usage']['clients_cpu_pct']:.0f}",
         f"{flr['latency_usage']['service_cpu_pct']:.0f}, "
         f"{flr['latency_usage']['clients_cpu_pct']:.0f}"],
    ]
    for i, (a, b) in enumerate(zip(svc["runs"], flr["runs"], strict=False), 1):
        rows += [
            [f"run {i}: events/s (frames/s)",
             f"{a['events_per_s']:.1f} ({a['frames_per_s']:,.0f})",
             f"{b['events_per_s']:.1f} ({b['frames_per_s']:,.0f})"],
            [f"run {i}: CPU % server / clients / machine",
             f"{a['service_cpu_pct']:.0f} / {a['clients_cpu_pct']:.0f} / "
             f"{a['machine_busy_pct']:.0f}",
             f"{b['service_cpu_pct']:.0f} / {b['clients_cpu_pct']:.0f} / "
             f"{b['machine_busy_pct']:.0f}"],
            [f"run {i}: CPU µs per frame, server / clients",
             f"{a['service_cpu_us_per_frame']:.1f} / {a['clients_cpu_us_per_frame']:.1f}",
             f"{b['service_cpu_us_per_frame']:.1f} / {b['clients_cpu_us_per_frame']:.1f}"],
            [f"run {i}: latency with the window full, p50 / p99 ms",
             f"{a['latency_p50_ms']:.0f} / {a['latency_p99_ms']:.0f}",
             f"{b['latency_p50_ms']:.0f} / {b['latency_p99_ms']:.0f}"],
        ]
    from tests.bench.report import table  # report imports this module first

    lines += table(["", "cordum-stream", "bare floor"], rows)
    lost = sum(r["not_delivered"] for r in svc["runs"]) + svc["latency_not_delivered"]
    lines += ["", f"What limited the events per second: for cordum-stream, "
                  f"{bottleneck(svc, cores)}; for the floor, {bottleneck(flr, cores)}. "
                  f"Events not at every client within 10 s: {lost}; clients the service "
                  f"closed: {svc['closed_by_server'] or 'none'}."]
    if svc.get("server_errors"):
        lines += ["", f"The service logged: {'; '.join(svc['server_errors'])}"]
    return lines
