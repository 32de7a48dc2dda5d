#!/usr/bin/env python3
"""Build the `cordum` Lambda layer (python3.12) reproducibly.

    python layers/build.py [--arch x86_64|arm64] [--out layers/build/cordum-layer]
                           [--refresh-deps] [--bytecode-python PATH | --no-bytecode]

Produces:

- ``<out>/python/``: the pinned third-party wheels of ``layers/requirements.txt``
  (installed for the Lambda platform, ``--no-deps``), plus ``shared/cordum``;
  Lambda mounts it at ``/opt/python``, which is on ``sys.path``.
- ``<out>.zip``: the same tree, with sorted entries, fixed timestamps and fixed
  permissions, so the same inputs give the same sha256.

The pip install is the slow part, so its result is cached outside the clone in
``${CORDUM_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/cordum-serverless}``, keyed by
architecture and the hash of requirements.txt. The cache keeps pip's output
untouched; stripping happens on the copy into ``<out>``, so changing the strip
rules never needs a fresh download.

Bytecode: Lambda mounts layers read-only, so a layer without ``.pyc`` files
makes every cold start compile each imported module again (measured here,
python3.12 -I: importing the gateway handler took 1.1 s from source and 0.5 s
from bytecode, the submit handler 0.9 s and 0.4 s).
When a python3.12 interpreter is available (``--bytecode-python``, else
``python3.12`` on PATH, else pyenv's) the layer ships ``__pycache__`` compiled
by it in ``unchecked-hash`` mode: the files do not depend on mtimes or on the
build folder, so the zip stays reproducible. Bytecode found in the inputs is
never copied. ``--no-bytecode`` leaves it out.

Standard library only: it runs under any python3.11+ that has pip.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO_ROOT / "layers" / "requirements.txt"
CORDUM_SOURCE = REPO_ROOT / "shared" / "cordum"
DEFAULT_OUT = REPO_ROOT / "layers" / "build" / "cordum-layer"

PYTHON_VERSION = "3.12"
"""Lambda runtime the layer targets (python3.12)."""

PLATFORMS = {
    "x86_64": "manylinux2014_x86_64",
    "arm64": "manylinux2014_aarch64",
}
"""Lambda architecture -> wheel platform tag accepted there (glibc 2.17+)."""

BUDGET_UNZIPPED_MIB = 80
BUDGET_ZIPPED_MIB = 30
"""Size budget of the layer; Lambda's own hard limit is 250 MiB unzipped for
function code and all layers together."""

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
"""Earliest date a zip entry can carry; any fixed value makes the zip stable."""

FILE_MODE = 0o644
DIR_MODE = 0o755
"""Fixed permissions: readable by the sandbox user, nothing executable needed
(shared objects are loaded with dlopen, which needs no execute bit)."""

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

_MIB = 1024 * 1024


class LayerBuildError(RuntimeError):
    """The layer could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class LayerBuild:
    """What one build produced."""

    out: Path
    """Layer folder; its `python/` subfolder is the layer content."""
    zip_path: Path
    """`<out>.zip`, deterministic."""
    sha256: str
    """Hex sha256 of the zip."""
    unzipped_bytes: int
    """Sum of the sizes of the files in the layer."""
    zipped_bytes: int
    """Size of the zip."""
    deps_dir: Path
    """Cached pip install the dependencies were copied from."""
    deps_cached: bool
    """True when the dependencies came from the cache without running pip."""
    bytecode_python: str | None
    """Interpreter that compiled the shipped `.pyc` files; None: no bytecode."""
    seconds: float
    """Wall time of the build."""


def cache_root() -> Path:
    """Cache folder shared by the project's tools (outside the clone)."""
    explicit = os.environ.get("CORDUM_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "cordum-serverless"


def requirements_hash(requirements: Path) -> str:
    """First 12 hex digits of the sha256 of the requirements file."""
    return hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]


def deps_dir_for(arch: str, requirements: Path, root: Path | None = None) -> Path:
    """Cache folder of the pip-installed dependencies for this arch and pin set."""
    root = cache_root() if root is None else root
    return root / f"layer-deps-{arch}-{requirements_hash(requirements)}"


def _platform(arch: str) -> str:
    try:
        return PLATFORMS[arch]
    except KeyError:
        raise LayerBuildError(
            f"unknown architecture {arch!r}; use one of: {', '.join(PLATFORMS)}"
        ) from None


def _count_pins(requirements: Path) -> int:
    lines = requirements.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


_NO_WHEEL = re.compile(
    r"(?:No matching distribution found for|"
    r"Could not find a version that satisfies the requirement)\s+(\S+)"
)


def _install_deps(arch: str, requirements: Path, target: Path, python: str, log_file: Path) -> None:
    """pip-install the pinned wheels for the Lambda platform into `target`."""
    cmd = [
        python, "-m", "pip", "install",
        "--no-deps",
        "--only-binary=:all:",
        "--platform", _platform(arch),
        "--implementation", "cp",
        "--python-version", PYTHON_VERSION,
        "--target", str(target),
        "--no-compile",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar", "off",
        "--requirement", str(requirements),
    ]  # fmt: skip
    # pip reads PIP_* variables too; a PIP_TARGET or PIP_USER from the caller's
    # shell would send the install elsewhere.
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_TARGET", "PIP_USER", "PIP_PREFIX")}
    env["PIP_ROOT_USER_ACTION"] = "ignore"
    with log_file.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
        except OSError as exc:
            raise LayerBuildError(f"cannot run {python!r} to call pip: {exc}") from exc
    if proc.returncode == 0:
        return
    text = log_file.read_text(encoding="utf-8", errors="replace")
    if "No module named pip" in text:
        raise LayerBuildError(
            f"{python} has no pip; install it (python -m ensurepip) or use another python"
        )
    missing = sorted(set(_NO_WHEEL.findall(text)))
    tail = "\n".join(text.splitlines()[-15:])
    if missing:
        raise LayerBuildError(
            f"pip could not get a {_platform(arch)} / cp{PYTHON_VERSION.replace('.', '')} "
            f"wheel for: {', '.join(missing)}.\n"
            "Every pin in layers/requirements.txt must publish a binary wheel for the "
            "Lambda platform (source builds are refused, they would target this machine); "
            "pick a version that has one, or check the network / package index.\n"
            f"--- pip output (tail, full log {log_file}) ---\n{tail}"
        )
    raise LayerBuildError(
        f"pip install of the layer dependencies failed (exit {proc.returncode}).\n"
        f"--- pip output (tail, full log {log_file}) ---\n{tail}"
    )


def ensure_deps(
    arch: str,
    requirements: Path = REQUIREMENTS,
    *,
    python: str = sys.executable,
    refresh: bool = False,
    root: Path | None = None,
    say: Callable[[str], None] = print,
) -> tuple[Path, bool]:
    """Return the cached dependency folder, installing it first when missing.

    The install goes to a temporary folder beside the final one and is renamed
    into place once complete, so an interrupted or concurrent build never
    leaves a half-filled cache entry behind. Returns (folder, was_cached).
    """
    final = deps_dir_for(arch, requirements, root)
    if final.is_dir() and not refresh:
        return final, True
    final.parent.mkdir(parents=True, exist_ok=True)
    say(
        f"==> layer deps ({arch}): pip-installing {_count_pins(requirements)} pinned wheels "
        f"for python{PYTHON_VERSION} into {final} (first time: about 10 s)"
    )
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    os.chmod(tmp, DIR_MODE)
    try:
        # The log stays beside the cache entry, so a failure can still be read.
        _install_deps(
            arch, requirements, tmp / "python", python, final.with_name(f"{final.name}.pip.log")
        )
        if refresh and final.exists():
            shutil.rmtree(final)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another build renamed the same pin set into place first; its
            # content is identical, keep it.
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final, False


def _copy_tree(src: Path, dst: Path, *, strip_tests: bool, top_level: bool = True) -> None:
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
            _copy_tree(entry, dst / name, strip_tests=strip_tests, top_level=False)
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


def _normalise_modes(root: Path) -> None:
    for path in root.rglob("*"):
        os.chmod(path, DIR_MODE if path.is_dir() else FILE_MODE)


def _file_sizes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_layer(
    arch: str = "x86_64",
    out: Path = DEFAULT_OUT,
    *,
    requirements: Path = REQUIREMENTS,
    source: Path = CORDUM_SOURCE,
    python: str = sys.executable,
    refresh_deps: bool = False,
    bytecode: bool = True,
    bytecode_python: str | None = None,
    cache_dir: Path | None = None,
    say: Callable[[str], None] = print,
) -> LayerBuild:
    """Build `<out>/python/` and `<out>.zip`; see the module docstring.

    `python` runs pip; `bytecode_python` (default: found with
    `find_bytecode_python`) compiles the layer when `bytecode` is true.
    """
    started = time.monotonic()
    _platform(arch)
    if not requirements.is_file():
        raise LayerBuildError(f"requirements file not found: {requirements}")
    if not source.is_dir():
        raise LayerBuildError(f"cordum package not found at {source}")
    out = out.resolve()
    deps, cached = ensure_deps(
        arch, requirements, python=python, refresh=refresh_deps, root=cache_dir, say=say
    )
    compiler: str | None = None
    if bytecode:
        compiler = bytecode_python or find_bytecode_python()
        if compiler is None:
            say(
                f"note: no python{PYTHON_VERSION} found, the layer ships without bytecode "
                "(slower cold starts); pass --bytecode-python"
            )

    # Assemble beside `out` and swap it in, so a reader (cdk synth) never sees a
    # half-copied layer.
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        site = staging / "python"
        _copy_tree(deps / "python", site, strip_tests=True)
        if (site / "cordum").exists():
            raise LayerBuildError("a dependency ships a top-level `cordum` package; it would clash")
        _copy_tree(source, site / "cordum", strip_tests=False)
        if compiler is not None:
            compile_bytecode(site, compiler)
            _normalise_modes(site)
        os.chmod(staging, DIR_MODE)
        if out.exists():
            shutil.rmtree(out)
        os.rename(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    zip_path = out.with_name(out.name + ".zip")
    write_deterministic_zip(out, zip_path)
    return LayerBuild(
        out=out,
        zip_path=zip_path,
        sha256=_sha256(zip_path),
        unzipped_bytes=_file_sizes(out),
        zipped_bytes=zip_path.stat().st_size,
        deps_dir=deps,
        deps_cached=cached,
        bytecode_python=compiler,
        seconds=time.monotonic() - started,
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch",
        choices=sorted(PLATFORMS),
        default="x86_64",
        help="Lambda architecture (default x86_64)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="layer folder; the zip is written beside it as <out>.zip "
        f"(default {DEFAULT_OUT.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--refresh-deps", action="store_true", help="reinstall the dependencies even when cached"
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--bytecode-python",
        metavar="PATH",
        help=f"python{PYTHON_VERSION} that compiles the layer's .pyc files "
        f"(default: python{PYTHON_VERSION} on PATH, else pyenv's)",
    )
    group.add_argument("--no-bytecode", action="store_true", help="ship sources only")
    return parser.parse_args(argv)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        result = build_layer(
            args.arch,
            args.out,
            refresh_deps=args.refresh_deps,
            bytecode=not args.no_bytecode,
            bytecode_python=args.bytecode_python,
        )
    except LayerBuildError as exc:
        print(f"layer build failed: {exc}", file=sys.stderr)
        return 1
    unzipped = result.unzipped_bytes / _MIB
    zipped = result.zipped_bytes / _MIB
    source = "cached" if result.deps_cached else "installed"
    print(f"layer:    {result.out}/python  (deps {source}: {result.deps_dir})")
    print(f"zip:      {result.zip_path}")
    print(f"bytecode: {result.bytecode_python or 'none'}")
    print(f"unzipped: {unzipped:.1f} MiB (budget {BUDGET_UNZIPPED_MIB})")
    print(f"zipped:   {zipped:.1f} MiB (budget {BUDGET_ZIPPED_MIB})")
    print(f"sha256:   {result.sha256}")
    print(f"time:     {result.seconds:.1f} s")
    if unzipped > BUDGET_UNZIPPED_MIB or zipped > BUDGET_ZIPPED_MIB:
        print("WARNING: the layer is over its size budget", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
