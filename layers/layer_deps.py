"""The layer's third-party dependencies: pinned wheels for the Lambda platform, cached.

pip installs ``layers/requirements.txt`` (``--no-deps``, binary wheels only) for
the target architecture and python3.12 into ``<cache>/layer-deps-<arch>-<hash>``
(see tool_cache), once per pin set. The cache keeps pip's output untouched;
stripping happens when build.py copies it into the layer.

Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tool_cache import build_atomically, cache_root, short_hash

PYTHON_VERSION = "3.12"
"""Lambda runtime the layer targets (python3.12)."""

PLATFORMS = {
    "x86_64": "manylinux2014_x86_64",
    "arm64": "manylinux2014_aarch64",
}
"""Lambda architecture -> wheel platform tag accepted there (glibc 2.17+)."""


class LayerBuildError(RuntimeError):
    """The layer could not be built; the message says why and what to do."""


def requirements_hash(requirements: Path) -> str:
    """First 12 hex digits of the sha256 of the requirements file."""
    return short_hash(requirements.read_bytes())


def deps_dir_for(arch: str, requirements: Path, root: Path | None = None) -> Path:
    """Cache folder of the pip-installed dependencies for this arch and pin set."""
    root = cache_root() if root is None else root
    return root / f"layer-deps-{arch}-{requirements_hash(requirements)}"


def platform_tag(arch: str) -> str:
    """The wheel platform tag of a Lambda architecture; LayerBuildError if unknown."""
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
        "--platform", platform_tag(arch),
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
            f"pip could not get a {platform_tag(arch)} / cp{PYTHON_VERSION.replace('.', '')} "
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
    requirements: Path,
    *,
    python: str = sys.executable,
    refresh: bool = False,
    root: Path | None = None,
    say: Callable[[str], None] = print,
) -> tuple[Path, bool]:
    """Return the cached dependency folder, installing it first when missing.

    Built atomically (tool_cache.build_atomically): an interrupted or concurrent
    build never leaves a half-filled cache entry behind, and of two concurrent
    builds of one pin set the first renamed into place stays. Returns
    (folder, was_cached).
    """
    final = deps_dir_for(arch, requirements, root)
    if final.is_dir() and not refresh:
        return final, True
    say(
        f"==> layer deps ({arch}): pip-installing {_count_pins(requirements)} pinned wheels "
        f"for python{PYTHON_VERSION} into {final} (first time: about 10 s)"
    )
    # The log stays beside the cache entry, so a failure can still be read.
    log_file = final.with_name(f"{final.name}.pip.log")
    build_atomically(
        final,
        lambda tmp: _install_deps(arch, requirements, tmp / "python", python, log_file),
        replace=refresh,
    )
    return final, False
