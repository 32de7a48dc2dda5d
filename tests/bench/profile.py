"""``make profile``: where each hot path spends its time, by cProfile, in process, on the
real Redis, a nats-server of our own with JetStream and the safety kernel (a process of
its own, so its time is not in the profiles).

Four paths, each set up as its benchmark sets it up:

- ``gateway``: HTTP submits through ``cordum.gateway.app`` (as ``bench_roundtrips``);
- ``submit`` and ``result``: 10-record SQS batches through the functions' batch
  handling (as ``bench_handler_cpu``, steady load);
- ``workflow``: ``WorkflowRunner.apply`` of step jobs' job-ended events, a linear
  workflow of worker steps (as ``bench_workflow``).

Each path runs once unprofiled (scripts, channels, imports warm), then profiled on the
CPU clock of its thread (``time.thread_time``: waits on sockets cost nothing). Writes
``profiles/<path>.txt`` (own time and cumulative time, top 30 each, with the work
profiled and the command) and ``profiles/summary.json`` (per path: the three functions
with the most own time and their share of the path's profiled total), which
``tests/bench/report.py`` renders into BENCHMARKS.md. A minute or two. Run:

    make profile    (or: python -m tests.bench.profile [--jobs N] [--steps N] [--runs N])
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import io
import json
import os
import pstats
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, free_port, progress

OUT = ROOT / "profiles"
TOP = 30


def tidy(text: str) -> str:
    """Paths relative to the repository or to site-packages, so the files read alike
    on every machine."""
    for prefix in (str(ROOT) + "/shared/", str(ROOT) + "/", sysconfig.get_paths()["stdlib"] + "/"):
        text = text.replace(prefix, "")
    return re.sub(r"[^\s(]*/site-packages/", "", text)


@contextlib.contextmanager
def jetstream_nats() -> Iterator[str]:
    """A nats-server with JetStream on a free port, its store in a temporary folder.

    The shared server's job stream is a work queue the local stack's bridge consumes:
    a second consumer of ``sys.job.submit`` is refused there, and that bridge would
    forward the benchmark's jobs to the stack's functions."""
    binary = shutil.which("nats-server", path=f"{os.environ.get('PATH')}:/usr/sbin:/usr/bin")
    assert binary, "nats-server not found (Debian package nats-server)"
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="cordum-bench-js-") as store:
        proc = subprocess.Popen([binary, "-js", "-sd", store, "-a", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
            progress(f"private nats-server (JetStream) pid {proc.pid} on 127.0.0.1:{port}")
            yield f"nats://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


def where(func: tuple[str, int, str]) -> str:
    file, line, name = func
    return tidy(f"{file}:{line}({name})") if line else name


def package(file: str) -> str:
    """Whose code a function is: ``cordum/<part>``, a library, asyncio, or C built-ins."""
    if file.startswith("~") or not file:
        return "built-ins (C)"
    parts = tidy(file).split("/")
    if parts[0] in ("cordum", "google", "tests") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0].removesuffix(".py")


def write(path: str, prof: cProfile.Profile, work: str, command: str) -> dict[str, Any]:
    """The text profile of one path, and its summary entry."""
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    buf = io.StringIO()
    buf.write(f"# {path}: {work}\n# command: {command}\n"
              f"# profiled total: {total:.3f} s of own time, {stats.total_calls:,} calls\n")  # type: ignore[attr-defined]
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
        buf.write(f"\n## by {title}, top {TOP}\n")
        stats.stream = buf  # type: ignore[attr-defined]
        stats.sort_stats(key).print_stats(TOP)
    text = re.sub(r"\n{3,}", "\n\n", tidy(buf.getvalue()))
    (OUT / f"{path}.txt").write_text(text)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    top = [{"function": where(func), "own_s": round(st[2], 4),
            "share": round(st[2] / total, 4) if total else 0.0, "calls": st[1]}
           for func, st in rows[:3]]
    ours = [{"function": where(func), "own_s": round(st[2], 4),
             "share": round(st[2] / total, 4) if total else 0.0, "calls": st[1]}
            for func, st in rows if where(func).startswith("cordum/")][:3]
    by_package: dict[str, float] = {}
    for func, st in rows:
        by_package[package(func[0])] = by_package.get(package(func[0]), 0.0) + st[2]
    packages = [{"package": k, "share": round(v / total, 4) if total else 0.0}
                for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])[:6]]
    progress(f"profile: {path}: {work}; {total:.2f} s profiled; top: "
             + ", ".join(f"{t['function']} {t['share']:.0%}" for t in top))
    return {"work": work, "total_s": round(total, 4), "top": top, "top_cordum": ours,
            "by_package": packages,
            "file": f"profiles/{path}.txt"}


def where_the_time_goes(path: Path = OUT / "summary.json") -> list[str]:
    """The BENCHMARKS.md section: each path's three costliest functions by own time."""
    lines = ["## Where the time goes", ""]
    if not path.exists():
        return [*lines, "No profile yet: `make profile` writes profiles/ (cProfile of each "
                        "hot path) and this section with it."]
    doc = json.loads(path.read_text())

    def top(rows: list[dict[str, Any]]) -> str:
        return "; ".join(f"`{r['function']}` {r['share']:.1%}" for r in rows) or "–"

    lines += [f"From `{doc['command']}` ({doc.get('written', 'date not recorded')}; `make "
              "profile`): cProfile of each hot path in process, CPU time of its thread, "
              "share of the path's profiled total. The whole profiles, by own and by "
              "cumulative time: profiles/<path>.txt.", "",
              "| path | work profiled | top three by own time | top three of cordum's own "
              "code by own time | own time by package |", "|---|---|---|---|---|"]
    for name, entry in doc["paths"].items():
        packages = "; ".join(f"{p['package']} {p['share']:.0%}"
                             for p in entry.get("by_package") or [])
        lines.append(f"| {name} | {entry['work']} | {top(entry['top'])} | "
                     f"{top(entry.get('top_cordum') or [])} | {packages or '–'} |")
    return lines


def profiled(prof: cProfile.Profile, fn: Callable[[], Any]) -> Any:
    prof.enable()
    try:
        return fn()
    finally:
        prof.disable()


def gateway(jobs: int, command: str) -> dict[str, Any]:
    from cordum import runtime
    from cordum.gateway.app import app
    from tests.bench.bench_roundtrips import gateway_event

    ids: list[str] = []

    def submit(i: int) -> None:
        resp = app.resolve(gateway_event({"topic": "job.echo", "prompt": f"profile {i}"},
                                         "bench"), None)
        assert resp["statusCode"] == 200, resp
        ids.append(json.loads(resp["body"])["job_id"])

    for i in range(10):
        submit(i)
    prof = cProfile.Profile(time.thread_time)
    for i in range(jobs):
        profiled(prof, lambda i=i: submit(i))  # type: ignore[misc]
    entry = write("gateway", prof, f"{jobs} HTTP submits (POST /api/v1/jobs)", command)
    redis = runtime.redis_client()
    for job_id in ids:  # the gateway's jobs stay PENDING: removed with their keys
        runtime.run(redis.delete(f"job:meta:{job_id}", f"job:req:{job_id}",
                                 f"job:events:{job_id}", f"ctx:{job_id}", f"trace:{job_id}"))
        runtime.run(redis.zrem("job:index:pending", job_id))
        runtime.run(redis.zrem("job:recent", job_id))
    if ids:
        runtime.run(redis.srem("job:tenant:active:bench", *ids))
    return entry


def handlers(batches: int, command: str) -> dict[str, dict[str, Any]]:
    from tests.bench.bench_handler_cpu import BATCH, Bench

    bench = Bench()
    engine = bench.engine
    profs = {k: cProfile.Profile(time.thread_time) for k in ("submit", "result")}
    try:
        for b in range(batches + 1):  # the first batch unprofiled: warm
            ids = bench.store(BATCH)
            for kind, event, handle in (("submit", bench.requests(ids), engine.handle_request),
                                        ("result", bench.results(ids), engine.handle_result)):
                prof = profs[kind] if b else cProfile.Profile(time.thread_time)
                profiled(prof, functools.partial(bench.run_batch, event, handle))
    finally:
        bench.cleanup()
    n = batches * BATCH
    return {"submit": write("submit", profs["submit"], f"{n} jobs in {batches} 10-record "
                            "batches (the submit function's batch handling)", command),
            "result": write("result", profs["result"], f"{n} results in {batches} 10-record "
                            "batches (the result function's batch handling)", command)}


async def workflow(kernel_addr: str, steps: int, runs: int, command: str) -> dict[str, Any]:
    from cordum import runtime
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.workflows.service import WorkflowService
    from tests.bench.bench_workflow import _held_stack, definition

    s = _held_stack()(kernel_addr)
    await s.start()
    prof = cProfile.Profile(time.thread_time)
    on = [False]
    plain = s.runner.apply

    async def apply(event: Any) -> Any:
        if not (on[0] and event.kind == "job"):
            return await plain(event)
        prof.enable()
        try:
            return await plain(event)
        finally:
            prof.disable()

    s.runner.apply = apply  # type: ignore[method-assign]
    who = Principal(tenant=s.tenant, role="admin", principal_id=f"profile-{s.unique}")
    service = WorkflowService(s.definitions, s.store, s.runner)
    wf_id = f"profile-worker-{s.unique}"
    await service.save_definition(who, definition("worker", wf_id, steps))
    try:
        for r in range(runs + 1):  # the first run unprofiled: warm
            on[0] = bool(r)
            run_id = await service.start_run(who, wf_id, {"n": 1, "who": "ada"})
            s.run_ids.add(run_id)
            await s.drive(run_id, s.runner, f"s{steps}")
    finally:
        await s.definitions.delete_definition(s.tenant, wf_id)
        await s.close()
        await runtime.aclose()
    return write("workflow", prof, f"{runs * steps} job-ended events ({runs} runs of a "
                 f"{steps}-step linear workflow; runner.apply)", command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="gateway submits profiled")
    parser.add_argument("--batches", type=int, default=50, help="10-record batches profiled")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20, help="workflow runs profiled")
    args = parser.parse_args(argv)
    command = "python -m tests.bench.profile " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items())
    OUT.mkdir(exist_ok=True)
    addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"),
           "CORDUM_CONFIG_DIR": str(ROOT / "config")}
    kernel = subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The functions as deployed (output policy on, as bench_handler_cpu runs them); the
    # workflow path as bench_workflow runs it, with the setting it was started with.
    policy = os.environ.get("OUTPUT_POLICY_ENABLED")
    os.environ.update(SAFETY_KERNEL_ADDR=addr, CORDUM_CONFIG_DIR=str(ROOT / "config"),
                      POWERTOOLS_LOG_LEVEL="WARNING", OUTPUT_POLICY_ENABLED="true",
                      CORDUM_API_KEYS=json.dumps([{"key": "bench", "tenant": "bench"}]),
                      # The limiter still runs, with room for the whole run.
                      CORDUM_RATE_LIMIT_RPS="100000", CORDUM_RATE_LIMIT_BURST="100000")
    summary: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        with jetstream_nats() as nats_url:
            # Before the first import of the harness, which reads it once.
            os.environ["NATS_URL"] = nats_url
            from cordum import runtime
            from cordum.bus.streams import ensure_stream

            runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
            progress("profile: gateway")
            summary["gateway"] = gateway(args.jobs, command)
            progress("profile: submit and result")
            summary.update(handlers(args.batches, command))
            runtime.run(runtime.aclose())
            progress("profile: workflow")
            if policy is None:
                os.environ.pop("OUTPUT_POLICY_ENABLED")
            else:
                os.environ["OUTPUT_POLICY_ENABLED"] = policy
            from cordum import config

            config.settings.cache_clear()
            summary["workflow"] = asyncio.run(workflow(addr, args.steps, args.runs, command))
    finally:
        kernel.terminate()
        kernel.wait(5)
    (OUT / "summary.json").write_text(json.dumps(
        {"command": command, "seconds": round(time.monotonic() - t0, 1),
         "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "paths": summary},
        indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}/{{{','.join(summary)}}}.txt and summary.json "
          f"in {time.monotonic() - t0:.0f} s")
    for path, entry in summary.items():
        print(f"  {path}: " + "; ".join(f"{t['function']} {t['share']:.1%}"
                                        for t in entry["top"]))
        print("    cordum's own: " + "; ".join(f"{t['function']} {t['share']:.1%}"
                                              for t in entry["top_cordum"]))
        print("    by package: " + "; ".join(f"{p['package']} {p['share']:.0%}"
                                           for p in entry["by_package"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
