"""The pure parts of the dashboard's build (dashboard/build.py): which files index.html
loads at once, their gzipped size against the limit, whether dist/ is fresh, and the
node_modules link. npm itself runs in ``make test-dashboard``."""

from __future__ import annotations

import gzip
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    # By path and under its own name: ``build`` alone is also layers/build.py.
    spec = importlib.util.spec_from_file_location("dashboard_build",
                                                  ROOT / "dashboard" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dashboard_build"] = module
    spec.loader.exec_module(module)
    return module


build = _load()

VITE_INDEX = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="UTF-8" />
    <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
    <title>Cordum</title>
    <script type="module" crossorigin src="/assets/index-BdK3f9a1.js"></script>
    <link rel="modulepreload" crossorigin href="/assets/react-C0a1b2c3.js">
    <link rel="modulepreload" crossorigin href="/assets/query-D4e5f6a7.js">
    <link rel="stylesheet" crossorigin href="/assets/index-E8f9a0b1.css">
  </head>
  <body><div id="root"></div></body>
</html>
"""


def test_the_first_load_is_the_module_script_and_its_preloads_in_order():
    assert build.first_load_files(VITE_INDEX) == [
        "assets/index-BdK3f9a1.js", "assets/react-C0a1b2c3.js", "assets/query-D4e5f6a7.js"]


def test_the_first_load_leaves_out_styles_classic_scripts_other_origins_and_repeats():
    html = """<script src="/assets/legacy.js"></script>
    <script type="module" src="https://cdn.example/x.js"></script>
    <script type="module" src="//cdn.example/y.js"></script>
    <script type="module">import "./inline.js"</script>
    <SCRIPT TYPE="module" SRC="./assets/a.js?v=1"></SCRIPT>
    <link rel="modulepreload prefetch" href="assets/a.js">
    <link rel="preload" href="/assets/font.woff2">"""
    assert build.first_load_files(html) == ["assets/a.js"]


def test_gzip_size_is_level_9_and_independent_of_the_time():
    data = b"export const x = 1;\n" * 500
    assert build.gzip_size(data) == len(gzip.compress(data, compresslevel=9, mtime=0))
    assert build.gzip_size(data) < len(data) // 10


def _dist(tmp_path: Path, files: dict[str, bytes]) -> Path:
    dist = tmp_path / "dist"
    for name, data in {"index.html": VITE_INDEX.encode(), **files}.items():
        (dist / name).parent.mkdir(parents=True, exist_ok=True)
        (dist / name).write_bytes(data)
    return dist


def test_the_report_sums_the_first_load_and_counts_every_asset(tmp_path):
    files = {"assets/index-BdK3f9a1.js": b"a" * 3000, "assets/react-C0a1b2c3.js": b"b" * 5000,
             "assets/query-D4e5f6a7.js": b"c" * 7000, "assets/index-E8f9a0b1.css": b"d" * 9000,
             "assets/lazy-F1.js": os.urandom(4000)}
    dist = _dist(tmp_path, files)
    first = build.asset_sizes(dist, build.first_load_files(VITE_INDEX))
    total = build.totals(first)
    assert total.raw == 15000
    assert total.gzipped == sum(build.gzip_size(files[s.name]) for s in first)

    lines, within = build.size_report(dist)
    assert within
    assert any(line.lstrip().startswith("total") and "15.0 kB" in line for line in lines)
    assert lines[-1].startswith("all assets: 6 files")


def test_a_first_load_over_the_limit_fails(tmp_path):
    big = os.urandom(20_000)  # random bytes do not compress
    dist = _dist(tmp_path, {"assets/index-BdK3f9a1.js": big, "assets/react-C0a1b2c3.js": b"",
                            "assets/query-D4e5f6a7.js": b""})
    lines, within = build.size_report(dist, limit=10_000)
    assert not within and "OVER" in lines[-2]
    assert build.size_report(dist, limit=30_000)[1]


def test_a_file_index_html_loads_but_dist_lacks_is_an_error(tmp_path):
    dist = _dist(tmp_path, {"assets/index-BdK3f9a1.js": b"x"})
    with pytest.raises(build.BuildError, match="react-C0a1b2c3.js"):
        build.size_report(dist)


def _touch(path: Path, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    os.utime(path, (mtime, mtime))
    return path


def test_dist_is_fresh_only_when_newer_than_every_source_and_built_from_this_api(tmp_path):
    root = tmp_path / "dashboard"
    for name in ("src/app/main.tsx", "src/features/jobs/list.tsx", "index.html",
                 "package-lock.json", "vite.config.ts", "tsconfig.app.json"):
        _touch(root / name, 1000.0)
    _touch(root / "README.md", 5000.0)  # not a source
    _touch(root / "dist" / "index.html", 2000.0)
    _touch(root / "dist" / "assets" / "index-1.js", 2001.0)
    sources = build.source_files(root)
    assert {p.relative_to(root).as_posix() for p in sources} == {
        "src/app/main.tsx", "src/features/jobs/list.tsx", "index.html", "package-lock.json",
        "vite.config.ts", "tsconfig.app.json"}
    newest, oldest = build.newest_mtime(sources), build.dist_oldest_mtime(root / "dist")
    assert (newest, oldest) == (1000.0, 2000.0)

    assert build.is_fresh(newest, oldest, "h1", "h1")
    # Another OpenAPI document, or none recorded: build again.
    assert not build.is_fresh(newest, oldest, "h1", "h2")
    assert not build.is_fresh(newest, oldest, None, "h1")
    # A source edited after the build.
    _touch(root / "src" / "features" / "jobs" / "list.tsx", 3000.0)
    assert not build.is_fresh(build.newest_mtime(build.source_files(root)), oldest, "h1", "h1")


def test_a_dist_without_index_html_is_never_fresh(tmp_path):
    _touch(tmp_path / "dist" / "assets" / "index-1.js", 2000.0)
    assert build.dist_oldest_mtime(tmp_path / "dist") is None
    assert not build.is_fresh(1000.0, None, "h", "h")
    assert build.dist_oldest_mtime(tmp_path / "nothing") is None


def test_the_stamp_records_the_api_the_build_was_made_from(tmp_path):
    stamp = tmp_path / "dashboard-build.json"
    assert build.built_openapi_hash(stamp) is None
    build.write_stamp("abc", stamp)
    assert build.built_openapi_hash(stamp) == "abc"
    stamp.write_text("not json")
    assert build.built_openapi_hash(stamp) is None


def test_node_modules_is_a_link_replaced_when_the_lock_file_changes(tmp_path):
    first, second = tmp_path / "cache-a" / "node_modules", tmp_path / "cache-b" / "node_modules"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    link = tmp_path / "dashboard" / "node_modules"
    link.parent.mkdir()
    build.link_node_modules(link, first)
    assert link.is_symlink() and link.resolve() == first.resolve()
    build.link_node_modules(link, second)
    assert link.resolve() == second.resolve()
    assert sorted(p.name for p in link.parent.iterdir()) == ["node_modules"]


def test_the_node_modules_folder_is_keyed_by_the_lock_file(tmp_path, monkeypatch):
    monkeypatch.setenv("CORDUM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "DASHBOARD", tmp_path)
    (tmp_path / "package.json").write_text('{"name": "d"}')
    (tmp_path / "package-lock.json").write_text('{"lockfileVersion": 3}')
    before = build.node_modules_dir()
    assert before.parent == tmp_path / "cache"
    assert before.name.startswith("dashboard-node-modules-")
    assert build.node_modules_dir() == before
    (tmp_path / "package-lock.json").write_text('{"lockfileVersion": 3, "x": 1}')
    assert build.node_modules_dir() != before
