"""The layer contract (tests/lint/layers.py) holds for the project, and the check
itself catches what it is meant to catch."""

from __future__ import annotations

from pathlib import Path

from tests.lint.layers import check, project_roots

REPO = Path(__file__).resolve().parents[2]


def test_the_project_keeps_its_layers():
    problems = check(project_roots(REPO))
    assert problems == [], "\n".join(problems)


def tree(tmp_path: Path, files: dict[str, str]) -> list[tuple[Path, str]]:
    for name, text in {**files, "cordum/__init__.py": ""}.items():
        path = tmp_path / "shared" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [(tmp_path / "shared", "cordum")]


def test_an_upward_import_is_reported_with_its_place(tmp_path):
    roots = tree(tmp_path, {
        "cordum/store/__init__.py": "",
        "cordum/store/jobs.py": "\n\ndef f():\n    from cordum.scheduler.engine import Engine\n",
        "cordum/scheduler/__init__.py": "",
        "cordum/scheduler/engine.py": "Engine = 1\n",
    })
    [problem] = check(roots)
    assert "store/jobs.py:4" in problem and "a layer above it (cordum.scheduler)" in problem


def test_type_only_and_relative_imports_count(tmp_path):
    roots = tree(tmp_path, {
        "cordum/protocol.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from .gateway import app\n"),
        "cordum/gateway/__init__.py": "",
        "cordum/gateway/app.py": "",
    })
    [problem] = check(roots)
    assert "cordum.protocol" in problem and "cordum.gateway.app" in problem


def test_packages_of_one_layer_are_independent(tmp_path):
    roots = tree(tmp_path, {
        "cordum/safety/__init__.py": "",
        "cordum/safety/client.py": "from cordum.registry import reader\n",
        "cordum/registry/__init__.py": "",
        "cordum/registry/reader.py": "",
    })
    [problem] = check(roots)
    assert "independent" in problem


def test_a_cycle_is_reported_once_with_its_members(tmp_path):
    roots = tree(tmp_path, {
        "cordum/gateway/__init__.py": "",
        "cordum/gateway/openapi.py": "def doc():\n    from cordum.gateway import docs\n",
        "cordum/gateway/docs.py": "from cordum.gateway.openapi import doc\n",
    })
    assert check(roots) == ["import cycle: cordum.gateway.docs <-> cordum.gateway.openapi"]


def test_downward_and_foundation_imports_are_fine(tmp_path):
    roots = tree(tmp_path, {
        "cordum/config.py": "",
        "cordum/runtime.py": "from cordum.config import x\n",
        "cordum/store/__init__.py": "",
        "cordum/store/jobs.py": "from cordum import runtime, protocol\n",
        "cordum/protocol.py": "",
    })
    assert check(roots) == []
