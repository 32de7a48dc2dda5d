"""``make bench``: run every benchmark, collect the figures, write BENCHMARKS.md.

Each benchmark runs in a fresh interpreter (``python -m tests.bench.<module>
--json FILE``) and prints its progress as it goes; the figures come back as
JSON. Items 4 and 6 need the local stack: the stack named by
``CORDUM_LOCAL_ENV`` when it is set (used as it is, never started or stopped
here), else this checkout's. A stack this run brought up is taken down again
at the end, as ``make e2e`` does; its bridge logs each SQS call
(BRIDGE_SQS_CALL_LOG=1), which item 4 times apart from our own work. A stack
already up has its bridge as it was started (``BRIDGE_SQS_CALL_LOG=1 make up``
for the same).

Knobs (environment): BENCH_ONLY / BENCH_SKIP (comma-separated item names:
roundtrips, cpu, control_plane, cold_start, scale, workflow, stream, policy_replay, audit,
dispatch, sustained), BENCH_CP_BATCHES, BENCH_REPLAY_JOBS, BENCH_REPLAY_RUNS, BENCH_AUDIT_ACTS,
BENCH_LATENCY_JOBS, BENCH_LATENCY_RATE, BENCH_SUSTAINED_JOBS, BENCH_SUSTAINED_CONCURRENCY,
BENCH_SCALE_JOBS, BENCH_SCALE_RUNS, BENCH_IMPORT_RUNS, BENCH_CPU_BATCHES,
BENCH_ROUNDTRIP_JOBS, BENCH_WORKFLOW_STEPS, BENCH_WORKFLOW_RUNS, BENCH_SQS_FLOOR_BATCH,
BENCH_SQS_FLOOR_INTERVAL, BENCH_STREAM_CLIENTS, BENCH_STREAM_SSE, BENCH_STREAM_DEFLATE,
BENCH_STREAM_EVENTS, BENCH_STREAM_RUNS, BENCH_STREAM_WINDOW, BENCH_STREAM_LATENCY_EVENTS,
BENCH_STREAM_LATENCY_RATE, BENCH_STREAM_NATS_URL, BENCH_OUT (default
BENCHMARKS.md at the repo root).

The collected figures are kept in .cordum/bench/last-run.json;
``python -m tests.bench.run_all --render`` writes BENCHMARKS.md again from them
without measuring anything. The document itself is written by
:mod:`tests.bench.report`.
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

from tests.bench.common import ROOT, env_int, local_env_path, read_local_env
from tests.bench.report import report

LAST_RUN = ROOT / ".cordum" / "bench" / "last-run.json"


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
    clients = env_int("BENCH_STREAM_CLIENTS", 1000)
    return [
        Item("roundtrips", "1. Redis round trips per job (output policy on, as deployed)",
             "tests.bench.bench_roundtrips", [rt_jobs, "--policy", "on"]),
        Item("roundtrips", "1. Redis round trips per job (output policy off)",
             "tests.bench.bench_roundtrips", [rt_jobs, "--policy", "off"]),
        Item("roundtrips", "1. Redis round trips per job (output policy on, config documents)",
             "tests.bench.bench_roundtrips", [rt_jobs, "--policy", "on", "--config-docs"]),
        Item("cpu", "2. Handler cost", "tests.bench.bench_handler_cpu",
             [str(env_int("BENCH_CPU_BATCHES", 30))]),
        Item("control_plane", "11. Whole control plane CPU per job and Lambda cost per "
             "million", "tests.bench.bench_control_plane",
             [str(env_int("BENCH_CP_BATCHES", 30))]),
        Item("cold_start", "3. Cold-start proxy and layer size", "tests.bench.bench_cold_start",
             []),
        Item("scale", "5. Scale", "tests.bench.bench_scale", []),
        Item("workflow", "7. Workflow engine cost per step", "tests.bench.bench_workflow",
             [str(env_int("BENCH_WORKFLOW_STEPS", 10)), "--runs",
              str(env_int("BENCH_WORKFLOW_RUNS", 7))]),
        Item("stream", f"8. Live event stream with {clients:,} clients",
             "tests.bench.bench_stream",
             ["--clients", str(clients), "--events", str(env_int("BENCH_STREAM_EVENTS", 200)),
              "--runs", str(env_int("BENCH_STREAM_RUNS", 3))]),
        Item("policy_replay", "9. Policy replay over one tenant's jobs",
             "tests.bench.bench_policy_replay",
             [str(env_int("BENCH_REPLAY_JOBS", 10_000)), "--runs",
              str(env_int("BENCH_REPLAY_RUNS", 5))]),
        Item("audit", "10. Audited governance acts", "tests.bench.bench_audited_act",
             [str(env_int("BENCH_AUDIT_ACTS", 500)), "--runs", "5"]),
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
        os.environ.setdefault("BRIDGE_SQS_CALL_LOG", "1")  # bench_dispatch's SQS call timing
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
