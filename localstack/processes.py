"""Processes, ports and logs of the local stack, for the launcher and the services.

Standard library only: ``launcher.py stop`` runs under a plain ``python3``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, exited but not reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(stat_path) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(Path(stat_path).parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (its leader may be gone), from /proc."""
    members = []
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(stat_path) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(Path(stat_path).parent.name))
    return members


def started_at(pid: int) -> float | None:
    """When ``pid`` started (epoch seconds), from /proc; None when it is not running."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (read from its end only)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 200 * lines))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no {path})"
    return "\n".join(text.splitlines()[-lines:])
