"""What ``make status`` shows: one row per process of the local stack, as a table or JSON.

The supervised services (safety kernel, bridge, echo worker) are read from their
supervisor's state file (supervisor.py); LocalStack from the launcher; Redis and
NATS have a row only when ``make up`` started them (a pid file names them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from processes import alive, started_at  # localstack/processes.py
from services import SERVICES, pid_file, read_pid  # localstack/services.py
from supervisor import Exit, epoch, read_state  # localstack/supervisor.py


def duration(seconds: float) -> str:
    # cordumctl's formatter (shared/cordumctl/output.py) needs the venv's packages;
    # imported when a table is drawn, so `make down` runs on any Python 3.11.
    from cordumctl.output import duration as formatted

    return formatted(seconds)


RUNNING = "running"
RESTARTING = "restarting"
"""The supervisor runs and waits to start the service's next child."""
STARTING = "starting"
"""The supervisor runs but has not written its state yet."""
STOPPED = "stopped"
UNHEALTHY = "unhealthy"
"""LocalStack's process runs but its health endpoint does not answer."""

SERVERS = ("redis", "nats")
"""Started by ``make up`` only when nothing answered at their URL."""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    name: str
    state: str
    pid: int | None = None
    """The process doing the work; for a supervised service, its current child."""
    started_at: float | None = None
    """When ``pid`` started (epoch seconds)."""
    supervisor_pid: int | None = None
    restarts: int | None = None
    """Children started after the first; None for a process nothing restarts."""
    last_exit: Exit | None = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING


def service_row(name: str) -> ProcessRow:
    supervisor_pid = read_pid(name)
    state = read_state(name)
    if supervisor_pid is None:
        # Stopped: what the last supervisor saw is still worth showing.
        return ProcessRow(name, STOPPED, restarts=state.restarts if state else None,
                          last_exit=state.last_exit if state else None)
    if state is None or state.supervisor_pid != supervisor_pid:
        return ProcessRow(name, STARTING, supervisor_pid=supervisor_pid, restarts=0)
    child = state.child_pid if state.child_pid is not None and alive(state.child_pid) else None
    return ProcessRow(
        name,
        RUNNING if child is not None else RESTARTING,
        pid=child,
        started_at=epoch(state.started_at) if child is not None and state.started_at else None,
        supervisor_pid=supervisor_pid,
        restarts=state.restarts,
        last_exit=state.last_exit,
    )


def localstack_row(status: Mapping[str, object]) -> ProcessRow:
    """From ``launcher.status()``."""
    pid = status.get("pid")
    if not status.get("running") or not isinstance(pid, int):
        return ProcessRow("localstack", STOPPED)
    return ProcessRow("localstack", RUNNING if status.get("healthy") else UNHEALTHY, pid=pid,
                      started_at=started_at(pid))


def server_row(name: str) -> ProcessRow:
    pid = read_pid(name)
    if pid is None:
        return ProcessRow(name, STOPPED)
    return ProcessRow(name, RUNNING, pid=pid, started_at=started_at(pid))


def collect(localstack: Mapping[str, object]) -> list[ProcessRow]:
    """Every row; ``localstack`` is ``launcher.status()``."""
    rows = [service_row(name) for name in SERVICES]
    rows.append(localstack_row(localstack))
    rows += [server_row(name) for name in SERVERS if pid_file(name).exists()]
    return rows


# ---------------------------------------------------------------- rendering


def last_exit_text(last: Exit | None, now: float) -> str:
    """``SIGKILL 2m05s ago after 41.0s``, or ``-``."""
    if last is None:
        return "-"
    return f"{last.cause} {duration(now - epoch(last.at))} ago after {duration(last.ran_s)}"


def table(rows: list[ProcessRow], now: float | None = None) -> str:
    now = time.time() if now is None else now
    lines = [("NAME", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT")]
    for row in rows:
        lines.append((
            row.name,
            row.state,
            str(row.pid) if row.pid is not None else "-",
            duration(now - row.started_at) if row.started_at is not None else "-",
            str(row.restarts) if row.restarts is not None else "-",
            last_exit_text(row.last_exit, now),
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False))
        + "  " + line[-1]
        for line in lines
    )


def as_json(rows: list[ProcessRow], now: float | None = None) -> dict[str, object]:
    now = time.time() if now is None else now
    return {
        "running": all(row.running for row in rows),
        "processes": [
            {
                "name": row.name,
                "state": row.state,
                "pid": row.pid,
                "supervisor_pid": row.supervisor_pid,
                "uptime_s": round(now - row.started_at, 1) if row.started_at else None,
                "restarts": row.restarts,
                "last_exit": asdict(row.last_exit) if row.last_exit else None,
            }
            for row in rows
        ],
    }
