"""Where the project's tools keep what they build, and how they build it safely.

The layer build (layers/build.py), the CDK CLI install (infra/cdk/cdk_cli.py)
and the LocalStack installation (localstack/installation.py) all keep heavy,
pin-keyed folders in one cache outside the clone, and all build a folder
beside its final place and rename it in, so that no reader ever sees a
half-built one.

It lives here, beside the layer build, because every other tool already
depends on the layer (the CDK app ships it, the local stack deploys it), and
it is a plain file rather than part of ``cordum``: it must run under any
python3.11+ before a venv exists (``make down`` without one), under no
PYTHONPATH, and it has no place in the Lambda layer. Callers put this folder
on ``sys.path`` by their own file's location. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

CACHE_ENV = "CORDUM_CACHE_DIR"
"""Overrides the cache folder (the Makefile sets it to the same place)."""

CACHE_NAME = "cordum-serverless"
"""The cache folder's name under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""

DIR_MODE = 0o755
"""A built folder is readable by everyone, whatever the umask (Lambda's sandbox
user is not the owner of layer files)."""


def cache_root() -> Path:
    """``$CORDUM_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/cordum-serverless``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / CACHE_NAME


def short_hash(data: bytes) -> str:
    """First 12 hex digits of the sha256 of `data`: the pin key in cache folder names."""
    return hashlib.sha256(data).hexdigest()[:12]


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def build_atomically(target: Path, build: Callable[[Path], None], *, replace: bool = False) -> bool:
    """Run `build` on a fresh empty folder beside `target`, then rename it to `target`.

    `replace`: an existing `target` is removed just before the rename (a rebuild).
    A `target` that appears between that and the rename is another process's
    build of the same inputs: it is kept and this one dropped. Returns True when
    this build is the one now in place. The temporary folder never outlives the call.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), dir=target.parent))
    try:
        os.chmod(tmp, DIR_MODE)
        build(tmp)
        if replace and target.exists():
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_leftovers(target: Path) -> None:
    """Remove the temporary folders of builds of `target` that were killed.

    Only safe under `target`'s :func:`file_lock`: then no build of it is running.
    """
    for leftover in target.parent.glob(f"{_temp_prefix(target)}*"):
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) between processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


LOG_TAIL_LINES = 40
"""Lines of a build log shown when the build fails."""


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, or ``(no log)``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
