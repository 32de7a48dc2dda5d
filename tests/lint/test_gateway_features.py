"""The gateway's features are independent packages over its core, wired by its app: the
gateway's lines of LAYERS (tests/lint/layers.py) hold that, and the check catches a
feature that imports another."""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

import pytest

from tests.lint.layers import LAYERS, check, graph, layer_of, project_roots

REPO = Path(__file__).resolve().parents[2]
GATEWAY = "cordum.gateway"
CORE = f"{GATEWAY}.core"
APP = f"{GATEWAY}.app"
FEATURES = tuple(p for p in next(layer for layer in LAYERS if f"{GATEWAY}.jobs" in layer)
                 if p.startswith(GATEWAY + "."))
"""The feature packages, as LAYERS lists them (one ``|`` layer)."""
ABOVE_FEATURES = (f"{GATEWAY}.capabilities",)
"""Packages the app wires like a feature that sit above the features (they ask them)."""


def tree(tmp_path: Path, files: dict[str, str]) -> list[tuple[Path, str]]:
    """A library of ``files`` (paths under ``shared/``) with every package's __init__."""
    for name, text in {**files, "cordum/__init__.py": "",
                       "cordum/gateway/__init__.py": ""}.items():
        path = tmp_path / "shared" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        init = path.parent / "__init__.py"
        if not init.exists():
            init.write_text("")
    return [(tmp_path / "shared", "cordum")]


def path_of(module: str) -> str:
    return module.replace(".", "/") + ".py"


def test_the_gateway_has_an_app_a_layer_of_features_and_a_core_below_them():
    assert {"jobs", "approvals", "dlq", "workflows", "system", "docs"} <= \
        {p.rpartition(".")[2] for p in FEATURES}
    app, feature, core = (layer_of(m) for m in (APP, f"{FEATURES[0]}.routes", f"{CORE}.http"))
    assert app is not None and feature is not None and core is not None
    assert app[0] < feature[0] < core[0]


@pytest.mark.parametrize(("importer", "imported"), list(permutations(FEATURES, 2)))
def test_a_feature_that_imports_another_is_reported(tmp_path, importer, imported):
    # Deferred, as a route module loads a service: it counts all the same.
    roots = tree(tmp_path, {
        path_of(f"{importer}.service"): f"\n\ndef f():\n    from {imported}.views import x\n",
        path_of(f"{imported}.views"): f"from {CORE}.http import json_response\n",
        path_of(f"{CORE}.http"): "",
    })
    [problem] = check(roots)
    assert f"{path_of(f'{importer}.service')}:4" in problem
    assert (f"{importer}.service ({importer}) imports {imported}.views ({imported}): "
            "packages of one layer are independent") in problem


def test_the_core_never_imports_a_feature(tmp_path):
    roots = tree(tmp_path, {
        path_of(f"{CORE}.deps"): f"from {GATEWAY}.jobs.service import JobService\n",
        path_of(f"{GATEWAY}.jobs.service"): "",
    })
    [problem] = check(roots)
    assert f"{CORE}.deps ({CORE}) imports {GATEWAY}.jobs.service, a layer above it" in problem


def test_features_build_on_the_core_and_the_app_wires_them(tmp_path):
    roots = tree(tmp_path, {
        path_of(f"{CORE}.http"): "from cordum.store import jobs\n",
        path_of(f"{GATEWAY}.jobs.routes"): f"from {CORE} import http\n",
        path_of(f"{GATEWAY}.dlq.routes"): f"from {CORE}.http import query\n",
        path_of(APP): (f"from {GATEWAY}.dlq import routes as dlq\n"
                       f"from {GATEWAY}.jobs import routes as jobs\n"),
        "cordum/store/jobs.py": "",
    })
    assert check(roots) == []


def test_every_gateway_module_has_its_place_and_every_feature_is_wired():
    files, edges = graph(project_roots(REPO))
    gateway = [m for m in files if m.startswith(GATEWAY + ".")]
    assert [m for m in gateway if layer_of(m) is None] == [], \
        "a gateway module outside LAYERS: list a new feature package there"
    wired = {e.imported.rpartition(".")[0] for e in edges
             if e.importer == APP and e.imported.endswith(".routes")}
    assert wired == set(FEATURES) | set(ABOVE_FEATURES), \
        "every feature's routes are registered in app.py"
