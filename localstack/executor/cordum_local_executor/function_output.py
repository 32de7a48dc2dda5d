"""A function process's output: collected from its pipe, kept for the invocation's logs.

Standard library only, like runtime_api; the executor imports it inside LocalStack.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from pathlib import Path

LOG_DIR_ENV = "CORDUM_LAMBDA_LOG_DIR"
"""When set, each function's output is also appended to ``<dir>/lambda-<function>.log``."""
# get_logs() is only for LocalStack's own error messages: keep the tail.
LOG_TAIL_CHARS = 64 * 1024


class FunctionOutput:
    """Collects a runtime process's output from its pipe.

    A reader thread keeps the pipe from filling up. ``drain()`` also reads
    what is still in the pipe, under the same lock: the runtime writes its
    output before it posts the response, so when the response arrives every
    byte of that invocation is in the pipe or already collected.
    """

    def __init__(self, fd: int, log_file: Path | None) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._lock = threading.Lock()
        self._chunks: list[str] = []
        self._tail = ""
        self._file = log_file.open("a", encoding="utf-8") if log_file else None
        self._thread = threading.Thread(target=self._pump, name="lambda-output", daemon=True)
        self._thread.start()

    def note(self, line: str) -> None:
        """Add a line of our own (START, END, REPORT, timeouts)."""
        with self._lock:
            self._append(line + "\n")

    def drain(self) -> str:
        with self._lock:
            self._read_available()
            text = "".join(self._chunks)
            self._chunks.clear()
        return text

    def tail(self) -> str:
        with self._lock:
            return self._tail

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._file:
                self._file.close()
                self._file = None

    def _pump(self) -> None:
        while True:
            with self._lock:
                fd = self._fd
            if fd < 0:
                return
            try:
                select.select([fd], [], [], 0.5)
            except (OSError, ValueError):
                return
            with self._lock:
                if self._read_available():
                    return

    def _read_available(self) -> bool:
        """Read what the pipe holds; True at end of file. Caller holds the lock."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not data:
                return True
            self._append(data.decode("utf-8", errors="replace"))
        return True

    def _append(self, text: str) -> None:
        self._chunks.append(text)
        self._tail = (self._tail + text)[-LOG_TAIL_CHARS:]
        if self._file:
            # awslambdaric joins a record's lines with \r (one CloudWatch event
            # each); in a plain file they would overwrite each other on screen.
            self._file.write(text.replace("\r", "\n"))
            self._file.flush()


def function_log_file(function_name: str) -> Path | None:
    """``<CORDUM_LAMBDA_LOG_DIR>/lambda-<function>.log``, or None when the variable is unset."""
    log_dir = os.environ.get(LOG_DIR_ENV)
    if not log_dir:
        return None
    path = Path(log_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path / f"lambda-{function_name}.log"


def peak_memory_mb(process: subprocess.Popen[bytes] | None) -> int | None:
    """The process's peak resident memory (VmHWM) for the REPORT line; None if unknown."""
    if process is None:
        return None
    try:
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        return None
    return None
