"""BENCHMARKS.md from the figures :mod:`tests.bench.run_all` collected: the budgets table
(each budget beside its figure and its floor), one section per benchmark
with its figures and details, and the machine and code they were measured on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.bench.common import fmt
from tests.bench.lambda_cost import details as cost_details
from tests.bench.profile import where_the_time_goes
from tests.bench.report_stream import stream_details

if TYPE_CHECKING:
    from datetime import datetime

EMULATOR_NOTE = (
    "LocalStack's event-source poller (the SQS to Lambda mapping) waits "
    "LAMBDA_EVENT_SOURCE_MAPPING_POLL_INTERVAL_SEC (1 s unless set) after every poll, "
    "a full batch included, and backs off up to "
    "LAMBDA_EVENT_SOURCE_MAPPING_MAX_BACKOFF_ON_EMPTY_POLL_SEC (10 s unless set) after "
    "empty polls. A job therefore waits about half a second for the poll on average "
    "(more after a quiet spell), and each function takes at most one 10-record batch a "
    "second: about 10 jobs/s end to end, whatever the functions cost. On AWS the mapping "
    "long-polls and scales its pollers.")


def cell(fig: dict[str, Any] | None) -> str:
    if not fig:
        return "not measured"
    runs = f"{fig['runs']} run" + ("s" if fig["runs"] != 1 else "")
    return f"**{fmt(fig['median'])} {fig['unit']}** ({fmt(fig['min'])}–{fmt(fig['max'])}, {runs})"


def floor_cell(fig: dict[str, Any] | None) -> str:
    if not fig or not fig.get("floor"):
        return "–"
    return f"{fmt(fig['floor']['median'])} {fig['unit']} (×{fmt(fig['ratio'])})"


def budget_rows(figs: dict[str, dict[str, Any]]) -> list[list[str]]:
    imports = [f for k, f in figs.items() if k.startswith("import_") and k != "import_boto3"]
    slowest = max(imports, key=lambda f: f["median"]) if imports else None
    all_imports = ("met" if imports and all(f["verdict"] == "met" for f in imports)
                   else "not met" if imports else "not measured")
    layer_u, layer_z = figs.get("layer_unzipped"), figs.get("layer_zipped")
    rt_off = figs.get("roundtrips_total_off")
    cpu_in_flight = figs.get("cpu_submit_inflight")

    def verdict(fig: dict[str, Any] | None) -> str:
        return fig["verdict"] if fig else "not measured"

    def row(label: str, target: str, fid: str, extra: str = "") -> list[str]:
        fig = figs.get(fid)
        return [label, target, cell(fig) + extra, floor_cell(fig), verdict(fig)]

    wf_cpu = figs.get("wf_cpu_transform")
    sqs = figs.get("bridge_sqs_call_p50")
    rows = [
        row("Redis round trips per job, HTTP submit to SUCCEEDED (gateway + submit + result)",
            "<= 10", "roundtrips_total_on",
            f"; output policy off: {fmt(rt_off['median'])}" if rt_off else ""),
        row("whole control-plane CPU per job (gateway + bridge's own work + submit + "
            "result), one process, real Redis and NATS", "within 2.5x its floor", "cp_cpu_job"),
        row("submit handler CPU per job in a 10-record batch, real Redis on loopback",
            "<= 2 ms", "cpu_submit",
            f"; 1,000 in flight: {fmt(cpu_in_flight['median'])} ms" if cpu_in_flight else ""),
        ["handler module import in a fresh interpreter (slowest of the functions)",
         "<= 400 ms each",
         (cell(slowest) + f" ({slowest['label'].split()[1]})") if slowest else "not measured",
         floor_cell(slowest) + " vs `import boto3`" if slowest else "–", all_imports],
        ["dispatch latency of our own hops (gateway handler + bridge's own work + submit "
         "receipt to publish, + the bridge's SQS call's excess over 1.5 × its floor), local "
         "stack", "p50 <= 30 ms summed", dispatch_cell(figs),
         floor_cell(sqs) + " (bridge's SendMessageBatch vs bare boto3)" if sqs else "–",
         verdict(figs.get("dispatch_own_p50"))],
        row("reconciler tick with 1,000,000 jobs stored and 1,000 stale",
            "<= 2 s, cost O(stale)", "reconciler_tick_ms"),
        row("routing over 10,000 workers", "<= 5 ms", "routing_10000"),
        ["layer size", "<= 80 MiB unzipped, <= 30 MiB zipped",
         f"{cell(layer_u)} unzipped; {cell(layer_z)} zipped" if layer_u and layer_z
         else "not measured", floor_cell(layer_u) + " (dependencies alone)" if layer_u else "–",
         ("met" if layer_u and layer_z and layer_u["verdict"] == layer_z["verdict"] == "met"
          else "not met" if layer_u and layer_z else "not measured")],
        row("Redis round trips per workflow step, linear run of worker steps (lock + load + "
            "job's end, save, unlock + outbox clear)", "<= 4", "wf_roundtrips_step"),
        row("workflow engine CPU per step (runner.apply of a step job's end), real Redis and "
            "NATS on loopback", "<= 5 ms", "wf_cpu_step",
            f"; transform-only steps: {fmt(wf_cpu['median'])} ms" if wf_cpu else ""),
    ]
    return rows


def dispatch_cell(figs: dict[str, dict[str, Any]]) -> str:
    """The own-hops sum, its parts, and what is reported apart beside it."""
    own = figs.get("dispatch_own_p50")
    if not own:
        return "not measured"
    parts = [figs.get(k) for k in ("dispatch_gateway_p50", "dispatch_bridge_own_p50",
                                   "dispatch_submit_p50", "dispatch_sqs_excess")]
    text = cell(own)
    if all(parts):
        text += " = " + " + ".join(f"{fmt(f['median'])}" for f in parts if f) + (
            " (gateway + bridge's own + submit + SQS excess)")
    sqs, emulator = figs.get("bridge_sqs_call_p50"), figs.get("dispatch_emulator_p50")
    if sqs:
        floor = fmt(sqs["floor"]["median"]) if sqs.get("floor") else "n/a"
        text += (f"; apart: bridge SQS call {fmt(sqs['median'])} ms vs floor {floor} ms "
                 f"(×{fmt(sqs['ratio'])}, {'within' if sqs['verdict'] == 'met' else 'over'} "
                 "1.5×)")
    if emulator:
        text += f"; emulator queue hop {fmt(emulator['median'])} ms"
    return text


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def figure_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[f["label"].strip(), cell(f), floor_cell(f), f.get("budget") or "–",
             f.get("verdict") or "–", f.get("note") or ""] for f in result["figures"]]


def sqs_details(sqs: dict[str, Any]) -> list[str]:
    """How the bridge's SQS call and its floor were taken, and the excess rule applied."""
    floor = sqs.get("floor") or {}
    sizes = ", ".join(f"{n:,} of {k}" for k, n in (sqs.get("batch_sizes") or {}).items())
    ratio = sqs.get("ratio")
    if ratio is None:
        verdict = "no floor was measured, so the rule was not applied."
    elif ratio <= sqs["rule"]:
        verdict = (f"×{fmt(ratio)}: within {sqs['rule']:g}×, nothing is added to the own "
                   "hops.")
    else:
        verdict = (f"×{fmt(ratio)}: over {sqs['rule']:g}×, so the excess over the floor, "
                   f"{fmt(sqs['excess_ms'])} ms, is added to the own hops (the part over "
                   f"{sqs['rule']:g}× the floor alone would be "
                   f"{fmt(sqs.get('over_rule_ms'))} ms).")
    return [
        f"The bridge's SQS call: {sqs['calls']:,} SendMessageBatch calls to the submit "
        f"queue carried these jobs (entries per call: {sizes or 'n/a'}), timed by "
        f"{sqs['source']}. Its floor: the same call with {sqs['batch']} "
        f"entr{'y' if sqs['batch'] == 1 else 'ies'} of the same shape (a packet of "
        f"{floor.get('packet_bytes', '?')} bytes, taken from {floor.get('packet', '?')}, "
        f"wrapped as the bridge wraps it), made by a bare boto3 client "
        f"({floor.get('client', '?')}) in a process of its own against the same LocalStack "
        f"endpoint, to a scratch queue with the submit queue's attributes, "
        f"{sqs.get('floor_when', 'beside the load')}: "
        f"{sqs.get('floor_calls', 0):,} calls. Compared over the "
        f"{sqs.get('compared_calls', 0):,} calls of that size, p50 (median of the five "
        f"slices): ours {fmt(sqs['ours_p50'])} ms, floor {fmt(sqs['floor_p50'])} ms; over "
        f"all calls ours p50 {fmt(sqs.get('ours_p50_all'))} / p99 "
        f"{fmt(sqs.get('ours_p99_all'))} ms, floor p50 {fmt(sqs.get('floor_p50_all'))} / p99 "
        f"{fmt(sqs.get('floor_p99_all'))} ms. For reference, our client alone (the same "
        f"calls through `SqsClient` on an idle event loop in the floor's process, in turn with "
        f"boto3's, at the same moments, {sqs.get('alone_calls', 0):,} calls): "
        f"p50 {fmt(sqs.get('alone_p50_all'))} / "
        f"p99 {fmt(sqs.get('alone_p99_all'))} ms. The rule (our p50 <= "
        f"{sqs['rule']:g}× the floor's, else the excess counts against us): {verdict}",
    ]


def audit_details(result: dict[str, Any]) -> list[str]:
    """Item 10: each act without its event, with it, with it signed, side by side."""
    info = result.get("info") or {}
    figs = {f["id"]: f for f in result["figures"]}

    def med(fid: str, digits: int = 1) -> str:
        fig = figs.get(fid)
        return fmt(fig["median"], digits) if fig else "n/a"

    def cost(fid: str) -> str:
        fig = figs.get(fid)
        return f" (+{fmt(fig['median'], 1)})" if fig and fig["median"] >= 0 else (
            f" ({fmt(fig['median'], 1)})" if fig else "")

    def trips(act: str) -> str:
        runs = (info.get("round_trips") or {}).get(act) or {}
        return " / ".join(fmt(sorted(runs[v])[len(runs[v]) // 2]) if runs.get(v) else "n/a"
                          for v in ("none", "event", "hmac"))

    acts, runs, key = info.get("acts", 0), info.get("runs", 0), info.get("hmac_key_bytes", 32)
    lines = ["", f"{acts:,} acts per variant, one after another, in blocks of "
                 f"{info.get('block', 50)} taking turns with the other variants', {runs} runs "
                 "after a warm-up "
                 "(medians of the per-run means), on a redis-server of the benchmark's own. "
                 "Client µs per act, the event's cost beside it in parentheses (built and "
                 "encoded per act, as the gateway does); Redis µs per call from INFO "
                 f"commandstats (evalsha). HMAC: a {key}-byte key.", ""]
    rows = []
    for act, title in (("cancel", "job cancel (transition to CANCELLED)"),
                       ("gated", "gated submit (create in APPROVAL_REQUIRED)")):
        rows.append([title, med(f"audit_{act}_none_us"),
                     med(f"audit_{act}_event_us") + cost(f"audit_{act}_event_cost_us"),
                     med(f"audit_{act}_hmac_us") + cost(f"audit_{act}_hmac_cost_us"),
                     " / ".join(med(f"audit_{act}_{v}_redis") for v in ("none", "event", "hmac")),
                     trips(act)])
    lines += table(["act", "without event, µs", "with event, µs", "with event + HMAC, µs",
                    "Redis µs/call (without / with / + HMAC)", "round trips per act"], rows)
    note_us = float(info.get("library_note_us") or 2.0)
    chunk = figs.get("audit_chunk_redis")
    for act, what in (("cancel", "transition"), ("gated", "create")):
        plain, carried = figs.get(f"audit_{act}_plain_redis"), figs.get(f"audit_{act}_none_redis")
        if not plain or not carried:
            continue
        lines += ["", f"Unaudited {what}: plain script {fmt(plain['median'], 1)} µs/call in "
                      f"Redis vs script carrying the audit library {fmt(carried['median'], 1)} "
                      f"µs/call ({med(f'audit_{act}_library_redis')} µs per call, per run "
                      f"{fmt(figs[f'audit_{act}_library_redis']['min'], 1)} to "
                      f"{fmt(figs[f'audit_{act}_library_redis']['max'], 1)})."]
    if chunk:
        verdict = (f"over {note_us:g} µs: the chunk builds its tables (the SHA-256 constants) "
                   "and closures on every run of every job script that carries it, appending "
                   "or not; building them on the first append would take this off the job "
                   "hot path" if chunk["median"] > note_us else f"within {note_us:g} µs")
        lines += ["", f"The library chunk alone (`return 0` with it minus without): "
                      f"{fmt(chunk['median'], 1)} µs per script run in Redis "
                      f"({fmt(chunk['min'], 1)}–{fmt(chunk['max'], 1)}), {verdict}."]
    return lines


def item_details(result: dict[str, Any]) -> list[str]:
    info, lines = result.get("info") or {}, []
    if result["item"] in ("dispatch", "sustained") and info:
        lines += ["", EMULATOR_NOTE]
    if result["item"] == "dispatch" and info.get("hops"):
        lines += ["", f"{info['jobs']:,} echo jobs at {info['rate']:g}/s (submitted in "
                      f"{info['submit_seconds']:.0f} s); {info.get('acks_matched', 0):,} bridge "
                      f"acks matched, {info.get('worker_seen', 0):,} worker receipts seen, "
                      f"{info.get('not_succeeded', 0)} not SUCCEEDED "
                      f"{info.get('not_succeeded_states') or ''}. Slowest of our own and "
                      f"the emulator's hops at p50: {info.get('slowest_hop', '?')}.", ""]
        lines += table(["hop", "p50 ms", "p95 ms", "p99 ms", "p50 per slice (min–max)", "n"], [
            [h["hop"], fmt(h["p50"], 1), fmt(h["p95"], 1), fmt(h["p99"], 1),
             f"{fmt(min(h['p50_runs']), 1)}–{fmt(max(h['p50_runs']), 1)}"
             if h["p50_runs"] else "–", str(h["n"])] for h in info["hops"]])
    if result["item"] == "dispatch" and info.get("sqs"):
        lines += ["", *sqs_details(info["sqs"])]
    if result["item"] == "scale" and info.get("reconciler_series"):
        lines += ["", "Reconciler tick against the number stored and the number stale "
                      "(median of the runs; the floor reads the same pages and writes one "
                      "HSET per stale job):", ""]
        rows = []
        for row in info["reconciler_series"]:
            med = {k: sorted(row[k])[len(row[k]) // 2] for k in (
                "ms", "commands", "round_trips", "floor_ms", "floor_commands")}
            rows.append([f"{row['stored']:,}", f"{row['stale']:,}", fmt(med["ms"], 1),
                         fmt(med["commands"]), fmt(med["round_trips"]), fmt(med["floor_ms"], 1),
                         fmt(med["floor_commands"]), fmt(row["used_memory_mb"], 0)])
        lines += table(["jobs stored", "stale", "tick ms", "Redis commands", "round trips",
                        "floor ms", "floor commands", "Redis MB"], rows)
        if info.get("snapshot_bytes"):
            lines += ["", f"The 10,000-worker snapshot is {info['snapshot_bytes'] / 1e6:.1f} MB "
                          "of JSON."]
    if result["item"] == "sustained" and info:
        lines += ["", f"{info['jobs']:,} jobs by {info['concurrency']} HTTP clients, submitted "
                      f"in {info['submit_seconds']:.0f} s, all terminal after "
                      f"{info['seconds']:.0f} s. States: {info.get('states')}. Dispatches by "
                      f"worker: {info.get('by_worker')}. Failure reasons: "
                      f"{info.get('failure_reasons') or 'none'}.",
                  "", "Memory by key kind, bytes per job: " + ", ".join(
                      f"`{k}` {v:,.0f}" for k, v in (info.get("memory_breakdown") or {}).items())
                  + "."]
    if result["item"] == "stream" and info.get("service"):
        lines += stream_details(info)
    if result["item"] == "policy_replay" and info:
        lines += ["", f"{info['jobs']:,} SUCCEEDED jobs of one tenant, each with its stored "
                      f"request, in a redis-server of the benchmark's own; one job in ten "
                      f"changes under the candidate. The replay follows its cursors in "
                      f"{info['calls']} calls of max_jobs {info['max_jobs']:,}; the floor "
                      f"reads the same metas and requests, {info['batch']} jobs a pipelined "
                      f"round trip, from ids known beforehand, and evaluates each with "
                      f"nothing else."]
    if result["item"] == "audit" and result["figures"]:
        lines += audit_details(result)
    if result["item"] == "control_plane" and info.get("cost"):
        lines += cost_details(info)
    if result["item"] == "cold_start" and info:
        lines += ["", f"Interpreter: {info.get('python')}; Lambda runtime folder (boto3, "
                      f"awslambdaric): {info.get('runtime_dir')}; layer files: "
                      f"{info.get('layer_files')}."]
    return lines


def report(results: list[dict[str, Any]], mach: dict[str, str], started: datetime,
           seconds: float, stack_note: str) -> str:
    figs = {f["id"]: f for r in results for f in r["figures"]}
    rt = figs.get("roundtrips_total_on")
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m tests.bench.run_all`); every figure is the "
        "median of several runs with the smallest and largest run beside it, next to its "
        "budget and, where one exists, its floor (the least the same work "
        "can cost, measured in the same run) with the ratio figure / floor.",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}; whole run: {seconds / 60:.1f} min",
        f"- machine: {mach.get('cpu')} ({mach.get('cores')} cores), {mach.get('memory')}, "
        f"{mach.get('os')}",
        f"- software: Python {mach.get('python')} (benchmarks), {mach.get('redis')}, "
        f"{mach.get('nats')}, LocalStack {mach.get('localstack', 'n/a')}",
        f"- code: commit {mach.get('commit')}" + (" with local changes" if mach.get("dirty")
                                                  == "True" else ""),
        f"- stack: {stack_note}",
        "",
        f"Redis round trips per job: {fmt(rt['median']) if rt else 'not measured'}",
        "",
        "## Budgets",
        "",
    ]
    lines += table(["budget", "target", "measured (median, min–max)",
                    "floor (ratio)", "verdict"], budget_rows(figs))
    lines += ["", *where_the_time_goes()]
    lines += ["", "## Commands", ""]
    lines += [f"- `{r['command']}` ({r['seconds']:.0f} s{'' if r['ok'] else ', FAILED'})"
              for r in results]
    # Sections in the order (the stack items run last).
    for r in sorted(results, key=lambda r: int(r["title"].split(".", 1)[0])):
        lines += ["", f"## {r['title']}", ""]
        if not r["ok"]:
            lines += ["This benchmark failed; see the output of `make bench`.", ""]
        if r["figures"]:
            lines += table(["figure", "measured (median, min–max)", "floor (ratio)", "budget",
                            "verdict", "note"], figure_rows(r))
        lines += item_details(r)
    return "\n".join(lines) + "\n"
