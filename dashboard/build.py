#!/usr/bin/env python3
"""Build and test the dashboard (dashboard/: React, Vite, TypeScript).

    python dashboard/build.py [build|test|size] [--python PY] [--force]

- ``build`` (the default): the gateway's OpenAPI document into dashboard/openapi.json
  (``PY -m cordum.gateway.app``), then ``npm run build`` (API types generated from
  that document, the type check, the bundle into dashboard/dist), then the size of
  the first load: the JS files index.html loads, raw and gzipped, against
  FIRST_LOAD_LIMIT_BYTES gzipped (exit 1 over it), and the total of all assets.
  ``npm run build`` is skipped while dist/ is newer than every source and was built
  from the same OpenAPI document (:func:`is_fresh`), so a second ``make up`` is
  fast; ``--force`` builds anyway. The size check runs either way.
- ``test``: ``build`` (ESLint's typed rules need the generated API types), then
  ``npm test`` (Vitest, once: stdin is no terminal) and ``npm run lint`` (ESLint).
- ``size``: the size report of dist/ as it is.

node_modules: ``npm ci`` runs once per package-lock.json (and package.json) into
``<cache>/dashboard-node-modules-<hash12>`` outside the clone, built beside its
final place and renamed in (layers/tool_cache.py), and ``dashboard/node_modules``
is a symlink to it; a real ``dashboard/node_modules`` folder (a developer's own
``npm install``) is left alone and used.

Standard library only (python3.11+), like infra/cdk/cdk_cli.py; needs node and npm.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

DASHBOARD = Path(__file__).resolve().parent
REPO_ROOT = DASHBOARD.parent
if str(REPO_ROOT / "layers") not in sys.path:
    sys.path.append(str(REPO_ROOT / "layers"))

from tool_cache import build_atomically, cache_root, short_hash, tail  # noqa: E402

DIST = DASHBOARD / "dist"
OPENAPI = DASHBOARD / "openapi.json"
NODE_MODULES = DASHBOARD / "node_modules"
STAMP = REPO_ROOT / ".cordum" / "dashboard-build.json"
"""What the last good ``npm run build`` was built from (the OpenAPI document's hash);
kept out of dist/, which is shipped as it is."""

INSTALL_INPUTS = ("package.json", "package-lock.json", ".npmrc")
"""The files ``npm ci`` reads: they key the node_modules folder in the cache."""
SOURCES = ("src", "public", "index.html", "package.json", "package-lock.json",
           "vite.config.*", "tsconfig*.json")
"""What ``npm run build`` reads (globs under dashboard/), beside the OpenAPI document,
which is compared by content: it is written again on every build."""

FIRST_LOAD_LIMIT_BYTES = 300_000
"""The JS index.html loads, gzipped, at most (300 kB)."""
KB = 1000
"""Sizes are printed in kB of 1,000 bytes, as Vite prints them."""


class BuildError(RuntimeError):
    """npm or the OpenAPI writer failed, or the first load is over its limit."""


def report(line: str) -> None:
    # Flushed: npm writes to the same stdout (a log file under `make up`) between lines.
    print(line, flush=True)


# ---------------------------------------------------------------- node_modules


def node_modules_dir() -> Path:
    """``<cache>/dashboard-node-modules-<hash12 of package-lock.json and package.json>``."""
    data = b"".join(
        name.encode() + b"\0" + ((DASHBOARD / name).read_bytes()
                                 if (DASHBOARD / name).exists() else b"") + b"\0"
        for name in INSTALL_INPUTS
    )
    return cache_root() / f"dashboard-node-modules-{short_hash(data)}"



def find_npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError("npm not found: install Node.js (20+) and npm")
    return npm


def ensure_node_modules(say: Callable[[str], None] = report) -> Path:
    """``dashboard/node_modules``, installed (``npm ci``) into the cache when missing."""
    if NODE_MODULES.is_dir() and not NODE_MODULES.is_symlink():
        return NODE_MODULES
    if not (DASHBOARD / "package-lock.json").exists():
        raise BuildError("dashboard/package-lock.json is missing: npm ci needs it")
    final = node_modules_dir()
    modules = final / "node_modules"
    if not modules.is_dir():
        npm = find_npm()
        log = final.with_name(f"{final.name}.npm.log")
        say(f"==> dashboard: npm ci into {final} (first time: about a minute; log: {log})")

        def install(tmp: Path) -> None:
            for name in INSTALL_INPUTS:
                if (DASHBOARD / name).exists():
                    shutil.copyfile(DASHBOARD / name, tmp / name)
            with log.open("w", encoding="utf-8") as fh:
                proc = subprocess.run(
                    [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=tmp, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    check=False,
                )
            if proc.returncode != 0:
                raise BuildError(f"npm ci failed (exit {proc.returncode}):\n{tail(log)}")
            (tmp / "node_modules").mkdir(exist_ok=True)  # npm makes none for no dependencies

        # Another process installing the same lock file first is fine: theirs is kept.
        build_atomically(final, install)
        if not modules.is_dir():
            raise BuildError(f"{final} holds no node_modules: remove it and run again")
    link_node_modules(NODE_MODULES, modules)
    return modules


def link_node_modules(link: Path, target: Path) -> None:
    """Point ``link`` at ``target``, replacing a link to another folder in one rename."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp, target_is_directory=True)
    os.replace(tmp, link)


# ---------------------------------------------------------------- OpenAPI document


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_openapi(python: str) -> str:
    """Write dashboard/openapi.json from the gateway (only when its content changed, so
    its mtime tells when the API last changed); return its sha256."""
    tmp = OPENAPI.with_name(f".{OPENAPI.name}.tmp-{os.getpid()}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT / "shared"), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run([python, "-m", "cordum.gateway.app", str(tmp)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"{python} -m cordum.gateway.app failed (exit {proc.returncode}):\n"
                             f"{proc.stdout}{proc.stderr}")
        fresh = tmp.read_bytes()
        if not OPENAPI.exists() or OPENAPI.read_bytes() != fresh:
            os.replace(tmp, OPENAPI)
        return sha256_hex(fresh)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- staleness


def source_files(root: Path = DASHBOARD, patterns: Iterable[str] = SOURCES) -> list[Path]:
    """Every file of ``patterns`` under ``root`` (a folder's files, recursively)."""
    found: list[Path] = []
    for pattern in patterns:
        for match in sorted(root.glob(pattern)):
            if match.is_dir():
                found += sorted(p for p in match.rglob("*") if p.is_file())
            elif match.is_file():
                found.append(match)
    return found


def newest_mtime(paths: Iterable[Path]) -> float | None:
    times = [p.stat().st_mtime for p in paths]
    return max(times) if times else None


def dist_oldest_mtime(dist: Path) -> float | None:
    """When the oldest file of ``dist`` was written; None when it has no index.html."""
    if not (dist / "index.html").is_file():
        return None
    return min(p.stat().st_mtime for p in dist.rglob("*") if p.is_file())


def is_fresh(sources_newest: float | None, dist_oldest: float | None,
             built_openapi: str | None, openapi: str) -> bool:
    """Whether dist/ can be kept: every file of it newer than every source, and built from
    the OpenAPI document of this hash."""
    if dist_oldest is None or built_openapi != openapi:
        return False
    return sources_newest is None or dist_oldest > sources_newest


def built_openapi_hash(stamp: Path = STAMP) -> str | None:
    try:
        value = json.loads(stamp.read_text()).get("openapi_sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def write_stamp(openapi: str, stamp: Path = STAMP) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"openapi_sha256": openapi, "dist": str(DIST)}) + "\n")


# ---------------------------------------------------------------- first-load size


class _EntryScripts(HTMLParser):
    """The JS an HTML page loads at once: module scripts and module preloads."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name.lower(): value or "" for name, value in attrs}
        if tag == "script" and values.get("type", "").lower() == "module" and values.get("src"):
            self.urls.append(values["src"])
        elif tag == "link" and "modulepreload" in values.get("rel", "").lower().split() \
                and values.get("href"):
            self.urls.append(values["href"])


def first_load_files(index_html: str) -> list[str]:
    """The paths (relative to dist/) of the JS ``index_html`` loads, in order, once each;
    files of another origin are not ours to count."""
    parser = _EntryScripts()
    parser.feed(index_html)
    found: list[str] = []
    for url in parser.urls:
        parts = urlsplit(url)
        if parts.scheme or parts.netloc:
            continue
        path = parts.path
        while path.startswith(("./", "/")):
            path = path[2:] if path.startswith("./") else path[1:]
        if path and path not in found:
            found.append(path)
    return found


def gzip_size(data: bytes) -> int:
    return len(gzip.compress(data, compresslevel=9, mtime=0))


@dataclass(frozen=True, slots=True)
class AssetSize:
    name: str
    raw: int
    gzipped: int


def asset_sizes(root: Path, names: Iterable[str]) -> list[AssetSize]:
    out = []
    for name in names:
        data = (root / name).read_bytes()
        out.append(AssetSize(name, len(data), gzip_size(data)))
    return out


def totals(sizes: Iterable[AssetSize]) -> AssetSize:
    items = list(sizes)
    return AssetSize("total", sum(s.raw for s in items), sum(s.gzipped for s in items))


def kb(size: int) -> str:
    return f"{size / KB:.1f} kB"


def size_report(dist: Path, limit: int = FIRST_LOAD_LIMIT_BYTES) -> tuple[list[str], bool]:
    """The report's lines, and whether the first load is within ``limit`` gzipped."""
    index = dist / "index.html"
    if not index.is_file():
        raise BuildError(f"{index} is missing: run `make dashboard`")
    names = first_load_files(index.read_text(encoding="utf-8"))
    missing = [n for n in names if not (dist / n).is_file()]
    if missing:
        raise BuildError(f"index.html loads files dist/ does not have: {', '.join(missing)}")
    first = asset_sizes(dist, names)
    every = asset_sizes(dist, sorted(str(p.relative_to(dist)) for p in dist.rglob("*")
                                     if p.is_file()))
    width = max([len(s.name) for s in first] + [len("total")])
    lines = ["first load (the JS index.html loads):"]
    lines += [f"  {s.name.ljust(width)}  {kb(s.raw):>10}  {kb(s.gzipped):>10} gzip" for s in first]
    total, all_assets = totals(first), totals(every)
    within = total.gzipped <= limit
    lines.append(f"  {'total'.ljust(width)}  {kb(total.raw):>10}  {kb(total.gzipped):>10} gzip"
                 f"  (limit {kb(limit)} gzip{'' if within else ': OVER'})")
    lines.append(f"all assets: {len(every)} files, {kb(all_assets.raw)}, "
                 f"{kb(all_assets.gzipped)} gzip")
    return lines, within


def check_size(dist: Path = DIST, say: Callable[[str], None] = report) -> None:
    lines, within = size_report(dist)
    for line in lines:
        say(line)
    if not within:
        raise BuildError(f"the first load is over {kb(FIRST_LOAD_LIMIT_BYTES)} gzipped")


# ---------------------------------------------------------------- commands


def run_npm(args: list[str], say: Callable[[str], None]) -> None:
    say(f"==> dashboard: npm {' '.join(args)}")
    proc = subprocess.run([find_npm(), *args], cwd=DASHBOARD, stdin=subprocess.DEVNULL,
                          check=False)
    if proc.returncode != 0:
        raise BuildError(f"npm {' '.join(args)} failed (exit {proc.returncode})")


def build(python: str, force: bool = False, say: Callable[[str], None] = report) -> None:
    """dashboard/dist from the sources and the gateway's OpenAPI document."""
    ensure_node_modules(say)
    openapi = write_openapi(python)
    if not force and is_fresh(newest_mtime(source_files()), dist_oldest_mtime(DIST),
                              built_openapi_hash(), openapi):
        say("==> dashboard: dist/ is newer than its sources (--force builds anyway)")
    else:
        STAMP.unlink(missing_ok=True)
        run_npm(["run", "build"], say)
        write_stamp(openapi)
    check_size(DIST, say)


def test(python: str, say: Callable[[str], None] = report) -> None:
    build(python, say=say)
    run_npm(["test"], say)
    run_npm(["run", "lint"], say)


def default_python() -> str:
    """The project venv's interpreter when present, else this one."""
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dashboard/build.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="build", choices=("build", "test", "size"))
    parser.add_argument("--python", default=default_python(),
                        help="the interpreter that writes the OpenAPI document (the venv's)")
    parser.add_argument("--force", action="store_true", help="build even when dist/ is fresh")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.python, force=args.force)
        elif args.command == "test":
            test(args.python)
        else:
            check_size(DIST)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
