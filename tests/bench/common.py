"""What every benchmark module shares: figures, progress lines, ports, private servers.

A figure is a dict the runner (``run_all.py``) turns into a table row::

    {"id", "label", "unit", "median", "min", "max", "runs",
     "budget", "budget_value", "verdict", "floor", "ratio", "note"}

``median``/``min``/``max`` are over the runs named in ``runs`` (the spread
between runs, not inside one). ``verdict`` is "met" / "not met" where a budget
applies, "" otherwise; ``floor`` is the same quantity for the least work the
thing can do, measured in the same run, and ``ratio`` is figure / floor.
Each module prints its figures as it goes and, with ``--json PATH``, writes
them there as ``{"figures": [...], "info": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_T0 = time.monotonic()


def progress(msg: str) -> None:
    """A line on stderr with the seconds since start: long runs show they are alive."""
    print(f"    [{time.monotonic() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def figure(fid: str, label: str, unit: str, runs: Sequence[float], *,
           budget: str = "", budget_value: float | None = None, higher_is_better: bool = False,
           floor: Sequence[float] | None = None, note: str = "") -> dict[str, Any]:
    """One figure from its runs; the verdict compares the median with the budget."""
    fig: dict[str, Any] = {"id": fid, "label": label, "unit": unit, **summary(runs),
                           "runs": len(runs), "budget": budget, "verdict": "", "note": note,
                           "floor": None, "ratio": None}
    if budget_value is not None:
        ok = fig["median"] >= budget_value if higher_is_better else fig["median"] <= budget_value
        fig["verdict"] = "met" if ok else "not met"
        fig["budget_value"] = budget_value
    if floor:
        fig["floor"] = summary(floor)
        if fig["floor"]["median"]:
            fig["ratio"] = fig["median"] / fig["floor"]["median"]
    return fig


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def show(fig: dict[str, Any]) -> None:
    """Print a figure as a line (stdout)."""
    line = (f"{fig['label']}: {fmt(fig['median'])} {fig['unit']} "
            f"(min {fmt(fig['min'])}, max {fmt(fig['max'])}, {fig['runs']} runs)")
    if fig.get("floor"):
        line += f"; floor {fmt(fig['floor']['median'])} {fig['unit']}, ratio {fmt(fig['ratio'])}"
    if fig.get("budget"):
        line += f"; budget {fig['budget']}: {fig['verdict']}"
    print(line, flush=True)


def cli(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    return parser


def emit(path: Path | None, figures: list[dict[str, Any]], info: dict[str, Any]) -> None:
    for fig in figures:
        show(fig)
    if path is not None:
        path.write_text(json.dumps({"figures": figures, "info": info}, indent=1, default=str))


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    return float(raw) if raw.strip() else default


# ------------------------------------------------------------------ the local stack


def local_env_path() -> Path:
    """The stack's env file: ``CORDUM_LOCAL_ENV`` or this checkout's .cordum/local.env."""
    explicit = os.environ.get("CORDUM_LOCAL_ENV")
    return Path(explicit) if explicit else ROOT / ".cordum" / "local.env"


def read_local_env(path: Path | None = None) -> dict[str, str]:
    path = path or local_env_path()
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


def stack_logs_dir() -> Path:
    """Where the stack's processes and functions log (beside its env file)."""
    return local_env_path().parent / "logs"


# ------------------------------------------------------------------ a private Redis


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free loopback port, nothing saved, removed after.

    Scale benchmarks fill it with a million jobs; the shared Redis never sees them.
    """
    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/sbin:/usr/bin")
    if binary is None:
        raise SystemExit("redis-server not found (Debian package redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="cordum-bench-redis-") as data:
        proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", data, "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), \
                        socket.create_connection(("127.0.0.1", port), 0.2):
                    break
                time.sleep(0.05)
            else:
                raise SystemExit(f"private redis-server on port {port} did not come up")
            progress(f"private redis-server pid {proc.pid} on 127.0.0.1:{port}")
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            progress(f"private redis-server pid {proc.pid} stopped")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(milliseconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


# ------------------------------------------------------------------ a private NATS


@contextlib.contextmanager
def private_nats() -> Iterator[str]:
    """A nats-server of our own on a free loopback port (no JetStream), stopped after.

    The stream benchmark publishes thousands of packets on ``sys.job.submit``: on the
    shared server the job stream stores each one and a local stack's bridge forwards it
    to its submit function; here nobody but the benchmark hears them.
    """
    binary = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/bin")
    if binary is None:
        raise SystemExit("nats-server not found (Debian package nats-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"private nats-server on port {port} did not come up")
        progress(f"private nats-server pid {proc.pid} on 127.0.0.1:{port}")
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        progress(f"private nats-server pid {proc.pid} stopped")
