"""``make bench``: run every benchmark, collect the figures, write BENCHMARKS.md.

Each benchmark runs in a fresh interpreter (``python -m tests.bench.<module>
--json FILE``) and prints its progress as it goes; the figures come back as
JSON. Items 4 and 6 need the local stack: the stack named by
``CORDUM_LOCAL_ENV`` when it is set (used as it is, never started or stopped
here), else this checkout's. A stack this run brought up is taken down again
at the end, as ``make e2e`` does.

Knobs (environment): BENCH_ONLY / BENCH_SKIP (comma-separated item names:
roundtrips, cpu, cold_start, scale, workflow, dispatch, sustained), BENCH_LATENCY_JOBS,
BENCH_LATENCY_RATE, BENCH_SUSTAINED_JOBS, BENCH_SUSTAINED_CONCURRENCY,
BENCH_SCALE_JOBS, BENCH_SCALE_RUNS, BENCH_IMPORT_RUNS, BENCH_CPU_BATCHES,
BENCH_ROUNDTRIP_JOBS, BENCH_WORKFLOW_STEPS, BENCH_WORKFLOW_RUNS, BENCH_OUT (default
BENCHMARKS.md at the repo root).

The collected figures are kept in .cordum/bench/last-run.json;
``python -m tests.bench.run_all --render`` writes BENCHMARKS.md again from them
without measuring anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, env_int, fmt, local_env_path, read_local_env

LAST_RUN = ROOT / ".cordum" / "bench" / "last-run.json"

EMULATOR_NOTE = (
    "LocalStack's event-source poller (the SQS to Lambda mapping) waits "
    "LAMBDA_EVENT_SOURCE_MAPPING_POLL_INTERVAL_SEC (1 s unless set) after every poll, "
    "a full batch included, and backs off up to "
    "LAMBDA_EVENT_SOURCE_MAPPING_MAX_BACKOFF_ON_EMPTY_POLL_SEC (10 s unless set) after "
    "empty polls. A job therefore waits about half a second for the poll on average "
    "(more after a quiet spell), and each function takes at most one 10-record batch a "
    "second: about 10 jobs/s end to end, whatever the functions cost. On AWS the mapping "
    "long-polls and scales its pollers.")


@dataclass
class Item:
    name: str
    title: str
    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    needs_stack: bool = False


def items() -> list[Item]:
    rt_jobs = str(env_int("BENCH_ROUNDTRIP_JOBS", 20))
    return [
        Item("roundtrips", "1. Redis round trips per job (output policy on, as deployed)",
             "tests.bench.bench_roundtrips", [rt_jobs, "--policy", "on"]),
        Item("roundtrips", "1. Redis round trips per job (output policy off)",
             "tests.bench.bench_roundtrips", [rt_jobs, "--policy", "off"]),
        Item("cpu", "2. Handler cost", "tests.bench.bench_handler_cpu",
             [str(env_int("BENCH_CPU_BATCHES", 30))]),
        Item("cold_start", "3. Cold-start proxy and layer size", "tests.bench.bench_cold_start",
             []),
        Item("scale", "5. Scale", "tests.bench.bench_scale", []),
        Item("workflow", "7. Workflow engine cost per step", "tests.bench.bench_workflow",
             [str(env_int("BENCH_WORKFLOW_STEPS", 10)), "--runs",
              str(env_int("BENCH_WORKFLOW_RUNS", 7))]),
        Item("dispatch", "4. Dispatch latency through the local stack",
             "tests.bench.bench_dispatch", [], needs_stack=True),
        Item("sustained", "6. Sustained load", "tests.bench.bench_sustained", [],
             needs_stack=True),
    ]


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def selected(all_items: list[Item]) -> list[Item]:
    only = {s.strip() for s in os.environ.get("BENCH_ONLY", "").split(",") if s.strip()}
    skip = {s.strip() for s in os.environ.get("BENCH_SKIP", "").split(",") if s.strip()}
    return [i for i in all_items if (not only or i.name in only) and i.name not in skip]


# ------------------------------------------------------------------ the stack


class Stack:
    """The local stack items 4 and 6 run on; brought up here only when needed."""

    def __init__(self) -> None:
        self.started = False
        self._stack: Any = None

    def ensure(self) -> None:
        if os.environ.get("CORDUM_LOCAL_ENV"):
            say(f"using the stack of {os.environ['CORDUM_LOCAL_ENV']} as it is")
            return
        sys.path.insert(0, str(ROOT / "localstack"))
        import stack  # localstack/stack.py

        self._stack = stack
        if stack.is_up():
            say("the local stack is up: using it")
            return
        say("the local stack is not up: bringing it up (taken down again at the end)")
        stack.up(run_demo=False)
        self.started = True

    def release(self) -> None:
        if self.started and self._stack is not None:
            say("taking down the stack this run brought up")
            self._stack.down()


# ------------------------------------------------------------------ running


def run_item(item: Item, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{item.module.rsplit('.', 1)[1]}-{len(list(workdir.iterdir()))}.json"
    argv = [sys.executable, "-m", item.module, *item.args, "--json", str(out)]
    env = {**os.environ, **item.env,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    say(f"{item.title}: {' '.join(shlex.quote(a) for a in argv[1:-2])}")
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=ROOT, check=False)
    seconds = time.monotonic() - t0
    say(f"{item.title}: {'done' if proc.returncode == 0 else 'FAILED'} in {seconds:.0f} s")
    result: dict[str, Any] = {"item": item.name, "title": item.title, "seconds": seconds,
                              "command": "python -m " + " ".join([item.module, *item.args]),
                              "ok": proc.returncode == 0, "figures": [], "info": {}}
    if out.exists():
        result.update(json.loads(out.read_text()))
    return result


def machine() -> dict[str, str]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass

    def version(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10,
                                  check=False).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    info = {
        "host": platform.node(), "os": platform.platform(), "cpu": cpu,
        "cores": str(os.cpu_count()), "memory": mem,
        "python": platform.python_version(),
        "redis": version(["redis-server", "--version"]),
        "nats": version(["nats-server", "--version"]),
        "commit": version(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "dirty": str(bool(version(["git", "-C", str(ROOT), "status", "--porcelain"]) != "?"
                          and subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                                             capture_output=True, text=True,
                                             check=False).stdout.strip())),
    }
    url = read_local_env().get("LOCALSTACK_URL")
    if url:
        try:
            with urllib.request.urlopen(f"{url}/_localstack/health", timeout=5) as resp:
                info["localstack"] = json.loads(resp.read()).get("version", "?")
        except (OSError, ValueError):
            info["localstack"] = "not answering"
    return info


# ------------------------------------------------------------------ the report


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
    rows = [
        row("Redis round trips per job, HTTP submit to SUCCEEDED (gateway + submit + result)",
            "<= 10", "roundtrips_total_on",
            f"; output policy off: {fmt(rt_off['median'])}" if rt_off else ""),
        row("submit handler CPU per job in a 10-record batch, real Redis on loopback",
            "<= 2 ms", "cpu_submit",
            f"; 1,000 in flight: {fmt(cpu_in_flight['median'])} ms" if cpu_in_flight else ""),
        ["handler module import in a fresh interpreter (slowest of the functions)",
         "<= 400 ms each",
         (cell(slowest) + f" ({slowest['label'].split()[1]})") if slowest else "not measured",
         floor_cell(slowest) + " vs `import boto3`" if slowest else "–", all_imports],
        ["dispatch latency of our own hops (gateway handler + bridge forward + submit "
         "receipt to publish), local stack", "p50 <= 30 ms summed",
         cell(figs.get("dispatch_own_p50")) + (
             f"; emulator queue hop apart: {fmt(figs['dispatch_emulator_p50']['median'])} ms"
             if figs.get("dispatch_emulator_p50") else ""),
         floor_cell(figs.get("bridge_forward_p50")) + " (bridge hop vs one SQS call)"
         if figs.get("bridge_forward_p50") else "–", verdict(figs.get("dispatch_own_p50"))],
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


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def figure_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[f["label"].strip(), cell(f), floor_cell(f), f.get("budget") or "–",
             f.get("verdict") or "–", f.get("note") or ""] for f in result["figures"]]


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
        "budget from DESIGN.md and, where one exists, its floor (the least the same work "
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
    lines += table(["budget (DESIGN.md)", "target", "measured (median, min–max)",
                    "floor (ratio)", "verdict"], budget_rows(figs))
    lines += ["", "## Commands", ""]
    lines += [f"- `{r['command']}` ({r['seconds']:.0f} s{'' if r['ok'] else ', FAILED'})"
              for r in results]
    # Sections in the order (the stack items run last).
    for r in sorted(results, key=lambda r: r["title"].split(".", 1)[0]):
        lines += ["", f"## {r['title']}", ""]
        if not r["ok"]:
            lines += ["This benchmark failed; see the output of `make bench`.", ""]
        if r["figures"]:
            lines += table(["figure", "measured (median, min–max)", "floor (ratio)", "budget",
                            "verdict", "note"], figure_rows(r))
        lines += item_details(r)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", action="store_true",
                        help=f"only write the report again from {LAST_RUN.relative_to(ROOT)}")
    args = parser.parse_args()
    out = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
    if args.render:
        last = json.loads(LAST_RUN.read_text())
        out.write_text(report(last["results"], last["machine"],
                              datetime.fromisoformat(last["started"]), last["seconds"],
                              last["stack"]))
        say(f"wrote {out} from {LAST_RUN}")
        return 0
    started = datetime.now(UTC)
    t0 = time.monotonic()
    chosen = selected(items())
    stack = Stack()
    results: list[dict[str, Any]] = []
    stack_note = "not used"
    try:
        with tempfile.TemporaryDirectory(prefix="cordum-bench-") as tmp:
            for item in chosen:
                if item.needs_stack and not stack_note.startswith("local"):
                    stack.ensure()
                    stack_note = (f"local stack of {local_env_path()} "
                                  f"({'brought up by this run' if stack.started else 'already up'}"
                                  "; shared with whatever else ran on it meanwhile)")
                results.append(run_item(item, Path(tmp)))
    finally:
        stack.release()
    seconds = time.monotonic() - t0
    mach = machine()
    LAST_RUN.parent.mkdir(parents=True, exist_ok=True)
    LAST_RUN.write_text(json.dumps({"results": results, "machine": mach,
                                    "started": started.isoformat(), "seconds": seconds,
                                    "stack": stack_note}, indent=1, default=str))
    out.write_text(report(results, mach, started, seconds, stack_note))
    say(f"wrote {out} ({seconds / 60:.1f} min)")
    failed = [r["title"] for r in results if not r["ok"]]
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
