"""The function code asset: handler modules plus the shipped config files.

The asset is a staging folder recreated at every synth, so it holds exactly
the handler modules and ``config/`` (no bytecode, no stray files) and its
asset hash changes only when their content does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from cordum_infra.settings import ContextError

CONFIG_SUBDIR = "config"
"""Name of the config folder inside the task root (CORDUM_CONFIG_DIR)."""

_FILE_MODE = 0o644
_DIR_MODE = 0o755
# The Lambda sandbox user is not the file owner: everything must be
# world-readable, whatever the checkout's umask was.


def _copy_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    os.chmod(dst, _DIR_MODE)
    for entry in sorted(src.iterdir()):
        if entry.name == "__pycache__" or entry.name.endswith((".pyc", ".pyo")):
            continue
        if entry.is_dir():
            _copy_tree(entry, dst / entry.name)
        elif entry.is_file():
            shutil.copyfile(entry, dst / entry.name)
            os.chmod(dst / entry.name, _FILE_MODE)


def stage_function_code(
    functions_dir: Path, config_dir: Path, staging_dir: Path, handler_modules: list[str]
) -> Path:
    """Recreate `staging_dir` with `functions_dir/*.py` and `config_dir` as config/."""
    missing = [m for m in handler_modules if not (functions_dir / f"{m}.py").is_file()]
    if missing:
        names = ", ".join(f"{m}.py" for m in missing)
        raise ContextError(f"handler module(s) missing in {functions_dir}: {names}")

    staging_dir.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{staging_dir.name}.", dir=staging_dir.parent))
    try:
        os.chmod(fresh, _DIR_MODE)
        for module in sorted(functions_dir.glob("*.py")):
            shutil.copyfile(module, fresh / module.name)
            os.chmod(fresh / module.name, _FILE_MODE)
        _copy_tree(config_dir, fresh / CONFIG_SUBDIR)
        if staging_dir.exists():
            shutil.rmtree(staging_dir)
        os.rename(fresh, staging_dir)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh, ignore_errors=True)
    return staging_dir
