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


def test_the_engines_are_siblings_over_the_plumbing_they_share(tmp_path):
    roots = tree(tmp_path, {
        "cordum/workflow/__init__.py": "",
        "cordum/workflow/reconciler.py": ("from cordum.lambdas.ticks import run_ticks\n"
                                          "from cordum.scheduler import ticks\n"),
        "cordum/scheduler/__init__.py": "",
        "cordum/scheduler/ticks.py": "from cordum.lambdas.ticks import run_ticks\n",
        "cordum/lambdas/__init__.py": "",
        "cordum/lambdas/ticks.py": "run_ticks = 1\n",
    })
    [problem] = check(roots)
    assert "workflow/reconciler.py:2" in problem and "independent" in problem


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


def write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cordumctl_imports_nothing_of_cordum(tmp_path):
    write(tmp_path / "shared", {
        "cordum/__init__.py": "", "cordum/config.py": "",
        "cordumctl/__init__.py": "",
        "cordumctl/app.py": "def main():\n    from cordum import config\n",
        "cordumctl/output.py": "import cordum.nothing_here\n",
    })
    problems = check([(tmp_path / "shared", "cordum"), (tmp_path / "shared", "cordumctl")])
    assert len(problems) == 2
    assert "cordumctl/app.py:2: cordumctl.app imports cordum.config" in problems[0]
    assert "cordumctl.output imports cordum.nothing_here" in problems[1]
    assert all("client of the HTTP API only" in p for p in problems)


def test_the_local_stack_imports_its_scripts_by_bare_name(tmp_path):
    write(tmp_path, {
        "localstack/stack.py": "import services\n",
        "localstack/services.py": "def f():\n    import stack\n",
        # LocalStack's own package, not localstack/services.py:
        "localstack/executor/plugin_pkg/__init__.py": "",
        "localstack/executor/plugin_pkg/run.py": ("from localstack.services.lambda_ import x\n"
                                                  "from plugin_pkg import helpers\n"),
        "localstack/executor/plugin_pkg/helpers.py": "from plugin_pkg.run import y\n",
    })
    assert sorted(check([(tmp_path, "localstack")])) == [
        "import cycle: localstack.executor.plugin_pkg.helpers <-> "
        "localstack.executor.plugin_pkg.run",
        "import cycle: localstack.services <-> localstack.stack",
    ]
