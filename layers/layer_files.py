"""The layer's files: copied without what Lambda never imports, compiled, zipped reproducibly.

Bytecode is compiled in ``unchecked-hash`` mode (why: build.py's docstring), so
the files depend neither on mtimes nor on the build folder; bytecode found in
the inputs is never copied.

Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

from layer_deps import PYTHON_VERSION, LayerBuildError
from tool_cache import DIR_MODE

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
"""Earliest date a zip entry can carry; any fixed value makes the zip stable."""

FILE_MODE = 0o644
"""Fixed permissions (DIR_MODE for folders): readable by the sandbox user, nothing
executable needed (shared objects are loaded with dlopen, which needs no execute bit)."""

STRIP_DIR_NAMES = frozenset({"__pycache__", "tests", "testdata"})
"""Folders left out of dependencies. None of the pinned distributions imports
its test folders at run time (protobuf's `testdata` is an empty package)."""

STRIP_TOP_LEVEL = frozenset({"bin"})
"""Console scripts pip writes under --target; /opt/python/bin is on no PATH
and their shebang names the build machine's interpreter."""

STRIP_SUFFIXES = (".pyc", ".pyo")

ZIP_COMPRESSLEVEL = 6
"""Deflate level: 9 took twice as long here for a zip of the same size."""

BYTECODE_DIR = "/opt/python"
"""Folder recorded in the compiled files (where Lambda mounts the layer's
`python/`); the import system substitutes the real path when it loads them."""


def copy_tree(src: Path, dst: Path, *, strip_tests: bool, top_level: bool = True) -> None:
    """Copy `src` into `dst` without bytecode (and, for dependencies, tests)."""
    dst.mkdir(parents=True, exist_ok=True)
    os.chmod(dst, DIR_MODE)
    for entry in sorted(src.iterdir(), key=lambda p: p.name):
        name = entry.name
        if entry.is_dir() and not entry.is_symlink():
            if name == "__pycache__" or (strip_tests and name in STRIP_DIR_NAMES):
                continue
            if top_level and strip_tests and name in STRIP_TOP_LEVEL:
                continue
            copy_tree(entry, dst / name, strip_tests=strip_tests, top_level=False)
        elif entry.is_file():
            if name.endswith(STRIP_SUFFIXES):
                continue
            target = dst / name
            shutil.copyfile(entry, target)
            os.chmod(target, FILE_MODE)


def _python_minor(python: str) -> tuple[int, int] | None:
    try:
        proc = subprocess.run(
            [python, "-I", "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    parts = proc.stdout.split()
    if proc.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def find_bytecode_python() -> str | None:
    """A python3.12 interpreter to compile the layer with, or None."""
    candidates: list[str] = []
    on_path = shutil.which(f"python{PYTHON_VERSION}")
    if on_path:
        candidates.append(on_path)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += [str(p) for p in sorted(
        pyenv_root.glob(f"versions/{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}"), reverse=True
    )]  # fmt: skip
    candidates.append(f"/usr/bin/python{PYTHON_VERSION}")
    wanted = tuple(int(x) for x in PYTHON_VERSION.split("."))
    for candidate in candidates:
        if _python_minor(candidate) == wanted:
            return candidate
    return None


def compile_bytecode(site: Path, python: str) -> None:
    """Write unchecked-hash `.pyc` files for every module below `site`."""
    if _python_minor(python) != tuple(int(x) for x in PYTHON_VERSION.split(".")):
        raise LayerBuildError(f"{python} is not a python{PYTHON_VERSION} interpreter")
    cmd = [
        python, "-I", "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash",
        "-d", BYTECODE_DIR,
        str(site),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        # A module that does not compile under 3.12 cannot be imported there
        # either; say which one instead of shipping it silently.
        out = (proc.stdout + proc.stderr).strip()
        raise LayerBuildError(f"compiling the layer with {python} failed:\n{out[-3000:]}")


def normalise_modes(root: Path) -> None:
    """Give everything below `root` the fixed modes (compileall writes with the umask)."""
    for path in root.rglob("*"):
        os.chmod(path, DIR_MODE if path.is_dir() else FILE_MODE)


def _walk_sorted(root: Path) -> Iterator[Path]:
    """Every folder and file below `root`, in a stable order."""
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        yield entry
        if entry.is_dir():
            yield from _walk_sorted(entry)


def write_deterministic_zip(src_dir: Path, zip_path: Path) -> None:
    """Zip the content of `src_dir` with sorted entries, fixed times and modes."""
    tmp = zip_path.with_name(zip_path.name + ".tmp")
    with zipfile.ZipFile(
        tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=ZIP_COMPRESSLEVEL
    ) as zf:
        for path in _walk_sorted(src_dir):
            arcname = path.relative_to(src_dir).as_posix()
            if path.is_dir():
                info = zipfile.ZipInfo(arcname + "/", date_time=ZIP_TIMESTAMP)
                info.create_system = 3  # unix, so external_attr carries the mode
                info.external_attr = ((0o040000 | DIR_MODE) << 16) | 0x10
                zf.writestr(info, b"")
            else:
                info = zipfile.ZipInfo(arcname, date_time=ZIP_TIMESTAMP)
                info.create_system = 3
                info.external_attr = (0o100000 | FILE_MODE) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes(), compresslevel=ZIP_COMPRESSLEVEL)
    os.replace(tmp, zip_path)


def file_sizes(root: Path) -> int:
    """Sum of the sizes of the files below `root`."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
