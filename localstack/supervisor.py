"""Run one service of the local stack as a child and restart it when it exits, as ECS
restarts a task on AWS.

    python localstack/supervisor.py --name bridge -- python -m cordum.bus.bridge

Between restarts it waits 0.5 s, doubling up to 10 s; a child that ran 30 s
resets the wait. Each exit and restart is a line in the service's log (the
supervisor's stdout, which the child shares). Its state, read by ``make status``
and by services.py, is ``.cordum/supervisor/<name>.json`` (``State``), replaced
whole on every change.

SIGTERM or SIGINT stops it: the child gets SIGTERM, then SIGKILL after the
grace period, and nothing is restarted. The child stays in the supervisor's
process group, so ``services.stop_process`` (SIGTERM, then SIGKILL, to the
group) reaches both; a supervisor killed outright takes its child with it
(PR_SET_PDEATHSIG).

Standard library only, like processes.py.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

STATE_DIR = Path(__file__).resolve().parent.parent / ".cordum" / "supervisor"

log = logging.getLogger("supervisor")


# ---------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a child that exited is started again, and how long a stop may take."""

    initial_delay_s: float = 0.5
    """The wait before restarting a child that exited (after a run of ``healthy_after_s``)."""
    max_delay_s: float = 10.0
    """The wait doubles after each short run, up to this."""
    healthy_after_s: float = 30.0
    """A child that ran this long was healthy: its restart waits ``initial_delay_s`` again."""
    stop_grace_s: float = 10.0
    """After SIGTERM, the child gets this long to exit before SIGKILL."""

    def next_delay(self, previous_s: float | None, ran_s: float) -> float:
        """The wait before the next start, given the last wait and how long the child ran."""
        if previous_s is None or ran_s >= self.healthy_after_s:
            return self.initial_delay_s
        return min(previous_s * 2, self.max_delay_s)


# ---------------------------------------------------------------- state file


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


@dataclass(frozen=True, slots=True)
class Exit:
    """How a child ended."""

    code: int | None
    """Its exit status; None when a signal ended it."""
    signal: str | None
    """The signal that ended it (``SIGKILL``), if one did."""
    at: str
    """When the supervisor saw it end (ISO 8601, UTC)."""
    ran_s: float
    """How long it ran."""

    @classmethod
    def of(cls, returncode: int, ran_s: float) -> Exit:
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            return cls(code=None, signal=name, at=now_iso(), ran_s=round(ran_s, 3))
        return cls(code=returncode, signal=None, at=now_iso(), ran_s=round(ran_s, 3))

    @property
    def cause(self) -> str:
        """``SIGKILL`` or ``exit 1``."""
        return self.signal or f"exit {self.code}"


@dataclass(frozen=True, slots=True)
class State:
    """What ``.cordum/supervisor/<name>.json`` holds."""

    name: str
    supervisor_pid: int
    child_pid: int | None = None
    """The running child; None while waiting to restart and after a stop."""
    restarts: int = 0
    """Children started after the first one."""
    started_at: str | None = None
    """When the current child started (ISO 8601, UTC)."""
    next_start_at: str | None = None
    """When the next child starts, while waiting to restart."""
    last_exit: Exit | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> State:
        last = doc.get("last_exit")
        return cls(
            name=str(doc["name"]),
            supervisor_pid=int(doc["supervisor_pid"]),
            child_pid=doc.get("child_pid"),
            restarts=int(doc.get("restarts") or 0),
            started_at=doc.get("started_at"),
            next_start_at=doc.get("next_start_at"),
            last_exit=Exit(**last) if last else None,
        )


def state_path(name: str, state_dir: Path = STATE_DIR) -> Path:
    return state_dir / f"{name}.json"


def read_state(name: str, state_dir: Path = STATE_DIR) -> State | None:
    """The last state the supervisor of ``name`` wrote; None when there is none."""
    try:
        return State.from_json(json.loads(state_path(name, state_dir).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(state: State, state_dir: Path = STATE_DIR) -> None:
    # A reader never sees half a file: it sees the old one or the new one.
    path = state_path(state.name, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- signals


class Wakeups:
    """SIGTERM and SIGINT ask for a stop; SIGCHLD only wakes ``wait``.

    Every signal also writes a byte to a pipe (``signal.set_wakeup_fd``) that
    ``wait`` selects on: a child that exits, or a stop that arrives, between the
    loop's check and its wait still ends the wait at once.
    """

    def __init__(self) -> None:
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self.stop_signal: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def _stop(self, signum: int, _frame: object) -> None:
        self.stop_signal = self.stop_signal or signum

    @property
    def stopping(self) -> bool:
        return self.stop_signal is not None

    def wait(self, timeout_s: float) -> None:
        """Until a signal arrives or ``timeout_s`` passes."""
        select.select([self._read_fd], [], [], max(0.0, timeout_s))
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read_fd, 512):
                pass


def _die_with(supervisor_pid: int) -> Callable[[], None]:
    """The child's pre-exec step: SIGTERM to the child when the supervisor dies (Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None
    pr_set_pdeathsig = 1

    def pre_exec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        # The supervisor died between fork and prctl: nobody would signal us.
        if os.getppid() != supervisor_pid:
            os._exit(1)

    return pre_exec


# ---------------------------------------------------------------- supervisor


class Supervisor:
    def __init__(
        self, name: str, argv: list[str], state_dir: Path = STATE_DIR,
        policy: RestartPolicy | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.state_dir = state_dir
        self.policy = policy or RestartPolicy()
        self.state = State(name=name, supervisor_pid=os.getpid())

    def _save(self, **changes: object) -> None:
        self.state = replace(self.state, **changes)
        write_state(self.state, self.state_dir)

    def run(self) -> int:
        """Start the child, restart it whenever it exits, until SIGTERM or SIGINT. Returns 0."""
        wakeups = Wakeups()
        pre_exec = _die_with(os.getpid())
        self._save()
        log.info("supervising %s: %s", self.name, " ".join(self.argv))
        delay: float | None = None
        while True:
            started = time.monotonic()
            child = self._start(pre_exec)
            while child is not None and child.poll() is None and not wakeups.stopping:
                wakeups.wait(5.0)
            if child is not None and child.poll() is None:
                self._stop(child, started, wakeups)
                return 0
            ran = time.monotonic() - started
            last = Exit.of(child.returncode if child is not None else 127, ran)
            if wakeups.stopping:
                # The stop signal reached the whole group: the child went first.
                self._save(child_pid=None, last_exit=last)
                log.info("%s exited with %s after %.1f s; stopped (%s)", self.name,
                         _described(last), ran, _signal_name(wakeups.stop_signal))
                return 0
            delay = self.policy.next_delay(delay, ran)
            self._save(
                child_pid=None, last_exit=last,
                next_start_at=(datetime.now(UTC) + timedelta(seconds=delay)).isoformat(
                    timespec="milliseconds"),
            )
            log.warning("%s exited with %s after %.1f s; restart %d in %.1f s", self.name,
                        _described(last), ran, self.state.restarts + 1, delay)
            deadline = time.monotonic() + delay
            while not wakeups.stopping and time.monotonic() < deadline:
                wakeups.wait(deadline - time.monotonic())
            if wakeups.stopping:
                self._save(next_start_at=None)
                log.info("%s not restarted: stopped (%s)", self.name,
                         _signal_name(wakeups.stop_signal))
                return 0
            self.state = replace(self.state, restarts=self.state.restarts + 1)

    def _start(self, pre_exec: Callable[[], None]) -> subprocess.Popen[bytes] | None:
        """The child, sharing the supervisor's stdout, stderr and process group; None when
        it could not be started (that counts as an exit, and is restarted the same way)."""
        try:
            child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, preexec_fn=pre_exec)
        except OSError as exc:
            log.error("cannot start %s: %s", self.name, exc)
            self._save(child_pid=None, started_at=now_iso(), next_start_at=None)
            return None
        self._save(child_pid=child.pid, started_at=now_iso(), next_start_at=None)
        if self.state.restarts:
            log.info("%s restarted (restart %d, pid %d)", self.name, self.state.restarts,
                     child.pid)
        return child

    def _stop(self, child: subprocess.Popen[bytes], started: float, wakeups: Wakeups) -> None:
        log.info("%s: stopping %s (pid %d)", _signal_name(wakeups.stop_signal), self.name,
                 child.pid)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.policy.stop_grace_s
        while child.poll() is None and time.monotonic() < deadline:
            wakeups.wait(deadline - time.monotonic())
        if child.poll() is None:
            log.warning("%s still runs %g s after SIGTERM; SIGKILL", self.name,
                        self.policy.stop_grace_s)
            child.kill()
            child.wait()
        last = Exit.of(child.returncode, time.monotonic() - started)
        self._save(child_pid=None, last_exit=last)
        log.info("%s stopped (%s after %.1f s)", self.name, _described(last), last.ran_s)


def _described(last: Exit) -> str:
    return f"signal {last.signal}" if last.signal else f"code {last.code}"


def _signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "stop"


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="supervisor.py", description=__doc__.split("\n\n")[0],
        usage="%(prog)s --name NAME [options] -- COMMAND [ARG ...]",
    )
    defaults = RestartPolicy()
    parser.add_argument("--name", required=True, help="the service (names the state file)")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    parser.add_argument("--initial-delay", type=float, default=defaults.initial_delay_s)
    parser.add_argument("--max-delay", type=float, default=defaults.max_delay_s)
    parser.add_argument("--healthy-after", type=float, default=defaults.healthy_after_s)
    parser.add_argument("--stop-grace", type=float, default=defaults.stop_grace_s)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to supervise (give it after --)")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout,
        format="%(asctime)s %(levelname)s supervisor: %(message)s",
    )
    policy = RestartPolicy(
        initial_delay_s=args.initial_delay, max_delay_s=args.max_delay,
        healthy_after_s=args.healthy_after, stop_grace_s=args.stop_grace,
    )
    return Supervisor(args.name, command, args.state_dir, policy).run()


if __name__ == "__main__":
    sys.exit(main())
