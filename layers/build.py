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
architecture and the hash of requirements.txt (layer_deps.py). The cache keeps
pip's output untouched; stripping happens on the copy into ``<out>``
(layer_files.py), so changing the strip rules never needs a fresh download.

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
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from layer_deps import PLATFORMS, PYTHON_VERSION, LayerBuildError, ensure_deps, platform_tag
from layer_files import (
    compile_bytecode,
    copy_tree,
    file_sizes,
    find_bytecode_python,
    normalise_modes,
    sha256_of,
    write_deterministic_zip,
)
from tool_cache import build_atomically

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO_ROOT / "layers" / "requirements.txt"
CORDUM_SOURCE = REPO_ROOT / "shared" / "cordum"
DEFAULT_OUT = REPO_ROOT / "layers" / "build" / "cordum-layer"

BUDGET_UNZIPPED_MIB = 80
BUDGET_ZIPPED_MIB = 30
"""Size budget of the layer; Lambda's own hard limit is 250 MiB unzipped for
function code and all layers together."""

_MIB = 1024 * 1024


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
    platform_tag(arch)
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

    def assemble(staging: Path) -> None:
        site = staging / "python"
        copy_tree(deps / "python", site, strip_tests=True)
        if (site / "cordum").exists():
            raise LayerBuildError("a dependency ships a top-level `cordum` package; it would clash")
        copy_tree(source, site / "cordum", strip_tests=False)
        if compiler is not None:
            compile_bytecode(site, compiler)
            normalise_modes(site)

    # Swapped in whole, so a reader (cdk synth) never sees a half-copied layer.
    build_atomically(out, assemble, replace=True)
    zip_path = out.with_name(out.name + ".zip")
    write_deterministic_zip(out, zip_path)
    return LayerBuild(
        out=out,
        zip_path=zip_path,
        sha256=sha256_of(zip_path),
        unzipped_bytes=file_sizes(out),
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
