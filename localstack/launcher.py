"""Host-mode LocalStack for the local stack: install, start, stop, status, logs.

    python localstack/launcher.py install   build what is missing, start nothing
    python localstack/launcher.py start     install if needed, start, wait until healthy
    python localstack/launcher.py stop      stop what `start` started
    python localstack/launcher.py status    exit 0 when running and healthy
    python localstack/launcher.py logs [-n N] [-f]

Also importable (``import launcher`` with localstack/ on sys.path):
``ensure_installed()``, ``start()``, ``stop()``, ``is_running()``, ``status()``,
``localstack_url()``; failures raise ``LauncherError`` with what to do.

What it needs is built by installation.py, in a cache outside the clone.
This module starts, watches and stops the LocalStack process.

LocalStack listens on 127.0.0.1 only. Its state, pid and logs live under
``<repo>/.cordum/``. Standard library only: it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from installation import (
    LOG_DIR,
    STATE_DIR,
    Installation,
    LauncherError,
    ensure_installed,
    say,
    warn_if_executor_changed,
)
from processes import alive, answers, descendants, signal_all, tail

# layers/ is on sys.path once installation is imported.
from tool_cache import file_lock

PID_FILE = STATE_DIR / "pids" / "localstack.pid"
LOG_FILE = LOG_DIR / "localstack.log"
DATA_DIR = STATE_DIR / "localstack"

DEFAULT_PORT = 4566
HEALTH_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
EXECUTOR_NAME = "cordum-local"
# The module LocalStack's process runs; it tells our process from others.
LOCALSTACK_MAIN = "localstack.runtime.main"

def localstack_port() -> int:
    raw = os.environ.get("LOCALSTACK_PORT", str(DEFAULT_PORT))
    try:
        return int(raw)
    except ValueError:
        raise LauncherError(f"LOCALSTACK_PORT must be a port number, not {raw!r}") from None


def localstack_url(port: int | None = None) -> str:
    return f"http://127.0.0.1:{port or localstack_port()}"


# -- processes -------------------------------------------------------------------


def _read_pid() -> int | None:
    try:
        return int(PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


# LocalStack processes started by this Python process (start() then stop() in
# one program): polling them reaps them, and keeping them referenced spares a
# "subprocess still running" warning when the caller exits first.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _alive(pid: int) -> bool:
    if pid in _STARTED:
        return _STARTED[pid].poll() is None
    return alive(pid)


def _is_localstack(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return LOCALSTACK_MAIN.encode() in cmdline


def _our_pid() -> int | None:
    """The pid in our pid file if it is a live LocalStack; a stale file is removed."""
    pid = _read_pid()
    if pid is None:
        return None
    if _alive(pid) and _is_localstack(pid):
        return pid
    PID_FILE.unlink(missing_ok=True)
    return None








_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _health(port: int) -> dict[str, object] | None:
    try:
        with _DIRECT.open(f"{localstack_url(port)}/_localstack/health", timeout=2) as response:
            return json.loads(response.read() or b"{}")
    except (OSError, ValueError, http.client.HTTPException):
        return None


def _localstack_env(installation: Installation, port: int) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The project's PYTHONPATH (repo root, with this localstack/ folder in
        # it) or venv must not leak into LocalStack's interpreter.
        if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    }
    env.update(
        {
            # hypercorn is the server that binds loopback only.
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            "GATEWAY_SERVER": "hypercorn",
            "DNS_ADDRESS": "0",
            "DISABLE_EVENTS": "1",
            # URLs LocalStack hands out (queue URLs, ...) must resolve here: the
            # *.localhost.localstack.cloud names do not.
            "LOCALSTACK_HOST": f"127.0.0.1:{port}",
            "SQS_ENDPOINT_STRATEGY": "path",
            # Host mode even inside a container (CI), so that LocalStack keeps its
            # files under FILESYSTEM_ROOT instead of /var/lib/localstack.
            "OVERRIDE_IN_DOCKER": "0",
            "LAMBDA_RUNTIME_EXECUTOR": EXECUTOR_NAME,
            "FILESYSTEM_ROOT": str(DATA_DIR / "fs"),
            "LOCALSTACK_VOLUME_DIR": str(DATA_DIR / "volume"),
            "TMPDIR": str(DATA_DIR / "tmp"),
            "CORDUM_LAMBDA_RUNTIMES": json.dumps(installation.runtimes),
            "CORDUM_LAMBDA_LOG_DIR": str(LOG_DIR),
        }
    )
    # The SQS -> Lambda poller waits 1 s after every poll by default, even after a
    # full batch, and backs off to 10 s when idle: about 0.6 s per queue hop and a
    # ceiling of one batch a second. AWS polls again at once; these come closer.
    # Set in the environment, they win.
    env.setdefault("LAMBDA_EVENT_SOURCE_MAPPING_POLL_INTERVAL_SEC", "0.05")
    env.setdefault("LAMBDA_EVENT_SOURCE_MAPPING_MAX_BACKOFF_ON_EMPTY_POLL_SEC", "0.5")
    # LocalStack emulates SQS's CloudWatch metrics with a PutMetricData call to
    # itself (and a SQLite insert) for every message sent, received and deleted,
    # which on two cores competes with the sends and polls themselves. AWS
    # computes them out of band and nothing local reads them.
    env.setdefault("SQS_DISABLE_CLOUDWATCH_METRICS", "1")
    return env


def start(*, port: int | None = None, timeout: float = HEALTH_TIMEOUT_S) -> str:
    """Start LocalStack unless ours already runs; return its URL once healthy."""
    port = port or localstack_port()
    url = localstack_url(port)
    with file_lock(PID_FILE.with_suffix(".lock")):
        pid = _our_pid()
        if pid is not None:
            if _health(port) is not None:
                say(f"LocalStack already running at {url} (pid {pid})")
                warn_if_executor_changed()
                return url
            say(f"LocalStack (pid {pid}) is starting; waiting for it")
            _wait_healthy(pid, port, timeout)
            return url
        if answers("127.0.0.1", port):
            raise LauncherError(
                f"port {port} is taken by a process this launcher did not start; "
                "stop it or choose another port with LOCALSTACK_PORT"
            )
        installation = ensure_installed()
        for folder in (LOG_DIR, PID_FILE.parent, DATA_DIR / "fs", DATA_DIR / "volume"):
            folder.mkdir(parents=True, exist_ok=True)
        # Unzipped function code of earlier runs; LocalStack keeps no state across starts.
        shutil.rmtree(DATA_DIR / "tmp", ignore_errors=True)
        (DATA_DIR / "tmp").mkdir(parents=True)
        if LOG_FILE.exists():
            os.replace(LOG_FILE, LOG_FILE.with_suffix(".log.1"))

        started = time.monotonic()
        say(f"==> LocalStack on {url}")
        with LOG_FILE.open("ab") as log:
            process = subprocess.Popen(
                [str(installation.python), "-m", LOCALSTACK_MAIN],
                env=_localstack_env(installation, port),
                cwd=DATA_DIR,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group, so stop() can end it with everything it started.
                start_new_session=True,
            )
        _STARTED[process.pid] = process
        tmp_pid = PID_FILE.with_suffix(".tmp")
        tmp_pid.write_text(f"{process.pid}\n")
        os.replace(tmp_pid, PID_FILE)
        try:
            _wait_healthy(process.pid, port, timeout)
        except LauncherError:
            _terminate(process.pid)
            PID_FILE.unlink(missing_ok=True)
            raise
        say(f"    up in {time.monotonic() - started:.1f} s (pid {process.pid}, log {LOG_FILE})")
        return url


def _wait_healthy(pid: int, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dots = 0
    while time.monotonic() < deadline:
        if not _alive(pid):
            _end_dots(dots)
            raise LauncherError(
                f"LocalStack exited during startup; last lines of {LOG_FILE}:\n"
                + tail(LOG_FILE, 40)
            )
        if _health(port) is not None:
            _end_dots(dots)
            return
        time.sleep(0.25)
        dots += 1
        if dots % 4 == 0:
            print(".", end="", flush=True)
    _end_dots(dots)
    raise LauncherError(
        f"LocalStack not healthy after {timeout:g} s; last lines of {LOG_FILE}:\n"
        + tail(LOG_FILE, 40)
    )


def _end_dots(dots: int) -> None:
    if dots >= 4:
        print(flush=True)


def _terminate(pid: int) -> None:
    """SIGTERM the process group, SIGKILL what is left after the grace period.

    Function processes run in sessions of their own (so a timeout can kill a
    function's children): they are found by parentage while LocalStack lives.
    """
    tree = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        tree += descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    signal_all([p for p in tree if _alive(p)], signal.SIGKILL)
    while _alive(pid) and time.monotonic() < deadline + 5:
        time.sleep(0.05)


def stop(*, port: int | None = None) -> bool:
    """Stop the LocalStack this launcher started; False when none was running."""
    port = port or localstack_port()
    with file_lock(PID_FILE.with_suffix(".lock")):
        pid = _our_pid()
        if pid is None:
            if answers("127.0.0.1", port):
                say(f"LocalStack is not running from here; port {port} is held by another process")
            else:
                say("LocalStack is not running")
            return False
        say(f"==> stopping LocalStack (pid {pid})")
        _terminate(pid)
        PID_FILE.unlink(missing_ok=True)
        deadline = time.monotonic() + 5
        while answers("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if answers("127.0.0.1", port):
            raise LauncherError(f"port {port} still open after stopping pid {pid}")
        say("    stopped")
        return True


def is_running(*, port: int | None = None) -> bool:
    """True when the LocalStack this launcher started is alive and healthy."""
    return _our_pid() is not None and _health(port or localstack_port()) is not None


def status(*, port: int | None = None) -> dict[str, object]:
    """``{"running", "healthy", "pid", "url", "services"}`` of our LocalStack."""
    port = port or localstack_port()
    pid = _our_pid()
    health = _health(port) if pid is not None else None
    return {
        "running": pid is not None,
        "healthy": health is not None,
        "pid": pid,
        "url": localstack_url(port),
        "services": (health or {}).get("services", {}),
    }


# -- command line ---------------------------------------------------------------------


def _logs(lines: int, follow: bool) -> None:
    print(tail(LOG_FILE, lines))
    if not follow:
        return
    with contextlib.suppress(KeyboardInterrupt), LOG_FILE.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        while True:
            chunk = handle.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            else:
                time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launcher.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install", help="build what is missing")
    commands.add_parser("start", help="start LocalStack and wait until healthy")
    commands.add_parser("stop", help="stop the LocalStack started from here")
    commands.add_parser("status", help="exit 0 when running and healthy")
    logs = commands.add_parser("logs", help="show LocalStack's log")
    logs.add_argument("-n", "--lines", type=int, default=50)
    logs.add_argument("-f", "--follow", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            installation = ensure_installed()
            say(f"LocalStack venv: {installation.venv}")
            for name, runtime in installation.runtimes.items():
                say(f"Lambda runtime {name}: {runtime['python']} + {runtime['path']}")
        elif args.command == "start":
            start()
        elif args.command == "stop":
            stop()
        elif args.command == "status":
            state = status()
            if not state["running"]:
                say("LocalStack is not running")
                return 3
            health = "healthy" if state["healthy"] else "not healthy"
            say(f"LocalStack running at {state['url']} (pid {state['pid']}), {health}")
            services = state["services"]
            if isinstance(services, dict) and services:
                say("  " + ", ".join(f"{k}: {v}" for k, v in sorted(services.items())))
            return 0 if state["healthy"] else 1
        elif args.command == "logs":
            _logs(args.lines, args.follow)
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
