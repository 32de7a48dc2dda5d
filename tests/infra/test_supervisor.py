"""The local stack's supervisor (localstack/supervisor.py) on real processes.

Each test runs the supervisor on a tiny Python child (sleeping, or exiting at
once) in a temporary state directory: a killed child comes back with a new pid,
a child that keeps exiting is restarted with growing waits, and a stop (SIGTERM,
or ``services.stop_process`` as ``make down`` does it) leaves no process behind.
No Redis, NATS or LocalStack; a few seconds in all.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "localstack"))

import services  # noqa: E402  (localstack/services.py)
from processes import alive, group_members  # noqa: E402  (localstack/processes.py)
from supervisor import State, read_state  # noqa: E402  (localstack/supervisor.py)

SUPERVISOR = str(ROOT / "localstack" / "supervisor.py")
SLEEPS = [sys.executable, "-c", "import time; time.sleep(120)"]
EXITS_AT_ONCE = [sys.executable, "-c", "raise SystemExit(3)"]
IGNORES_SIGTERM = [
    sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignored:', signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, flush=True); "
    "time.sleep(120)",
]
IGNORING = "ignored: True"
"""What IGNORES_SIGTERM prints once it ignores SIGTERM (its command line, also logged, has not
this text)."""
RESTART_LINE = re.compile(r"supervisor: \S+ exited with (.+?) after [\d.]+ s; "
                          r"restart (\d+) in ([\d.]+) s")


def wait_for(check: Callable[[], object], what: str, timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout:g} s: {what}")


class Supervised:
    """A supervisor started as ``make up`` starts one: its own session, stdout to a log."""

    def __init__(self, tmp: Path, command: list[str], *options: str) -> None:
        self.name = "sleeper"
        self.state_dir = tmp / "supervisor"
        self.log = tmp / "sleeper.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, SUPERVISOR, "--name", self.name,
                 "--state-dir", str(self.state_dir), *options, "--", *command],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self) -> State | None:
        return read_state(self.name, self.state_dir)

    def running_child(self, other_than: int | None = None) -> State:
        def found() -> State | None:
            state = self.state()
            child = state.child_pid if state else None
            return state if child and child != other_than and alive(child) else None

        return wait_for(found, f"a running child other than {other_than}")  # type: ignore[return-value]

    def restart_lines(self) -> list[tuple[str, int, float]]:
        return [(cause, int(n), float(delay))
                for cause, n, delay in RESTART_LINE.findall(self.log.read_text())]

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    started: list[Supervised] = []

    def start(command: list[str], *options: str) -> Supervised:
        started.append(Supervised(tmp_path, command, *options))
        return started[-1]

    yield start
    for supervised in started:
        supervised.kill_all()


def test_a_killed_child_is_restarted_with_a_new_pid(supervise) -> None:
    # Given a supervised child that runs
    sup = supervise(SLEEPS)
    first = sup.running_child()
    assert first.restarts == 0 and first.supervisor_pid == sup.pid
    # in the supervisor's process group, which `make down` signals
    assert os.getpgid(first.child_pid) == sup.pid
    # When the child is killed
    os.kill(first.child_pid, signal.SIGKILL)
    # Then a new child runs, restart 1, after the first wait
    second = sup.running_child(other_than=first.child_pid)
    assert second.restarts == 1
    assert second.last_exit is not None
    assert (second.last_exit.signal, second.last_exit.code) == ("SIGKILL", None)
    assert sup.restart_lines() == [("signal SIGKILL", 1, 0.5)]


def test_a_child_that_exits_at_once_is_restarted_with_growing_waits(supervise) -> None:
    # Given a child that exits at once on every start, with the default policy
    sup = supervise(EXITS_AT_ONCE)
    # Then each restart waits twice as long as the one before: no spinning
    wait_for(lambda: len(sup.restart_lines()) >= 3, "three exits", timeout=15)
    assert sup.restart_lines() == [("code 3", 1, 0.5), ("code 3", 2, 1.0), ("code 3", 3, 2.0)]
    state = sup.state()
    assert state is not None and state.restarts == 2 and state.child_pid is None
    assert state.last_exit is not None and state.last_exit.code == 3
    assert state.next_start_at is not None


def test_the_wait_stops_growing_at_its_ceiling(supervise) -> None:
    sup = supervise(EXITS_AT_ONCE, "--initial-delay", "0.1", "--max-delay", "0.4")
    wait_for(lambda: len(sup.restart_lines()) >= 5, "five exits")
    assert [delay for _, _, delay in sup.restart_lines()[:5]] == [0.1, 0.2, 0.4, 0.4, 0.4]


def test_a_child_that_ran_long_enough_restarts_after_the_first_wait_again(supervise) -> None:
    # Given a child that runs past --healthy-after before it exits, each time
    runs_then_exits = [sys.executable, "-c", "import time; time.sleep(0.4); raise SystemExit(1)"]
    sup = supervise(runs_then_exits, "--initial-delay", "0.1", "--healthy-after", "0.3")
    wait_for(lambda: len(sup.restart_lines()) >= 3, "three exits")
    # Then the wait never grows
    assert [delay for _, _, delay in sup.restart_lines()[:3]] == [0.1, 0.1, 0.1]


def test_sigterm_stops_the_child_and_the_supervisor_and_leaves_nothing(supervise) -> None:
    sup = supervise(SLEEPS)
    child = sup.running_child().child_pid
    # When only the supervisor gets SIGTERM
    sup.proc.send_signal(signal.SIGTERM)
    # Then it forwards it, waits for the child and exits without restarting
    assert sup.proc.wait(15) == 0
    assert child is not None and not alive(child)
    assert group_members(sup.pid) == []
    state = sup.state()
    assert state is not None and state.child_pid is None and state.restarts == 0
    assert state.last_exit is not None and state.last_exit.signal == "SIGTERM"
    assert "stopped" in sup.log.read_text()


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(supervise) -> None:
    sup = supervise(IGNORES_SIGTERM, "--stop-grace", "0.5")
    sup.running_child()
    wait_for(lambda: IGNORING in sup.log.read_text(), "the child's signal setup")
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.proc.wait(10) == 0
    assert group_members(sup.pid) == []
    state = sup.state()
    assert state is not None and state.last_exit is not None
    assert state.last_exit.signal == "SIGKILL"


def test_a_supervisor_killed_outright_takes_its_child_with_it(supervise) -> None:
    sup = supervise(SLEEPS)
    child = sup.running_child().child_pid
    assert child is not None
    sup.proc.send_signal(signal.SIGKILL)
    sup.proc.wait(5)
    wait_for(lambda: not alive(child), "the orphaned child to end", timeout=5)


@pytest.fixture
def pid_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(services, "PIDS", tmp_path / "pids")
    monkeypatch.setattr(services, "LOGS", tmp_path / "logs")
    return tmp_path


def _spawn_supervised(state_dir: Path, command: list[str]) -> int:
    return services.spawn(
        "sleeper",
        [sys.executable, SUPERVISOR, "--name", "sleeper", "--state-dir", str(state_dir),
         "--", *command],
        dict(os.environ),
    )


def test_stop_process_stops_a_supervisor_and_its_child(pid_dirs: Path) -> None:
    # Given a supervised service started as start_services starts one
    state_dir = pid_dirs / "supervisor"
    pid = _spawn_supervised(state_dir, SLEEPS)
    try:
        state = wait_for(lambda: (s := read_state("sleeper", state_dir)) and s.child_pid and s,
                         "the first child")
        # When `make down` stops it
        assert services.stop_process("sleeper")
        # Then nothing of its process group runs
        assert group_members(pid) == []
        assert not alive(pid) and not alive(state.child_pid)  # type: ignore[union-attr]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_stop_process_stops_a_child_its_supervisor_left_behind(pid_dirs: Path) -> None:
    # Given a child that ignores SIGTERM (so outlives its supervisor's end)
    state_dir = pid_dirs / "supervisor"
    pid = _spawn_supervised(state_dir, IGNORES_SIGTERM)
    log = pid_dirs / "logs" / "sleeper.log"
    try:
        wait_for(lambda: IGNORING in log.read_text(), "the child's signal setup")
        state = read_state("sleeper", state_dir)
        assert state is not None and state.child_pid is not None
        # and a supervisor killed outright
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), "the supervisor to end")
        assert group_members(pid) == [state.child_pid]
        # When `make down` stops it, then the group's last member is gone too
        assert services.stop_process("sleeper", timeout=0.5)
        assert group_members(pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
