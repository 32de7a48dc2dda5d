"""The gateway app includes a feature's routes on the first request whose path is the
feature's (``cordum.gateway.app.SEGMENTS``); these checks hold that table to the routes
themselves, so a request finds every route it could match whichever features were
loaded before it, and that a cold start imports no feature, pydantic or settings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cordum.gateway import app as gateway

REPO = Path(__file__).resolve().parents[2]


def _routes_of(name: str) -> set[tuple[str, str]]:
    router = gateway.load_feature(name).router
    return {(str(rule), str(method)) for rule, method, *_ in router._routes}


def test_every_route_is_found_by_the_segment_of_its_path():
    for name in gateway.FEATURES:
        for rule, _ in _routes_of(name):
            path = re.sub(r"<\w+>", "x", rule)
            assert gateway.SEGMENTS.get(gateway.segment(path)) == name, rule


def test_every_segment_names_a_feature_that_serves_it():
    served = {gateway.segment(re.sub(r"<\w+>", "x", rule))
              for name in gateway.FEATURES for rule, _ in _routes_of(name)}
    assert set(gateway.SEGMENTS) == served
    assert set(gateway.SEGMENTS.values()) <= set(gateway.FEATURES)


def test_a_route_parameter_never_spans_a_segment():
    # What makes the first segment enough: powertools' parameters stop at a "/".
    rule = gateway.app._compile_regex("/api/v1/jobs/<job_id>")
    assert rule.match("/api/v1/jobs/a.b~c:d")
    assert not rule.match("/api/v1/jobs/a/b")


def test_segment_of_paths():
    assert gateway.segment("/api/v1/jobs") == "jobs"
    assert gateway.segment("/api/v1/jobs/j-1/cancel") == "jobs"
    assert gateway.segment("/health") == "health"
    assert gateway.segment("/api/v1/openapi.json") == "openapi.json"
    assert gateway.segment("/") == ""


def test_loading_a_feature_twice_includes_its_routes_once():
    gateway.load_feature("locks")
    before = len(gateway.app._static_routes) + len(gateway.app._dynamic_routes)
    gateway.load_feature("locks")
    gateway.app.load_all()
    gateway.app.load_all()
    routes = [*gateway.app._static_routes, *gateway.app._dynamic_routes]
    keys = [(r.method, r.rule.pattern) for r in routes]
    assert len(keys) == len(set(keys)) >= before


def test_a_cold_start_imports_no_feature_nor_pydantic_and_loads_what_a_request_needs():
    code = ("import sys, functions.gateway\n"
            "from cordum.gateway import app\n"
            "heavy = [m for m in sys.modules if m.startswith(('pydantic', 'cordum.config',"
            " 'cordum.runtime', 'google.protobuf', 'yaml', 'cordum.safety'))"
            " or m.endswith('.routes')]\n"
            "print(heavy)\n"
            "missing = functions.gateway.handler({'path': '/api/v1/nothing',"
            " 'httpMethod': 'GET', 'headers': {}}, None)\n"
            "print(missing['statusCode'], sorted(app._loaded))\n"
            "bad = functions.gateway.handler({'path': '/api/v1/jobs', 'httpMethod': 'POST',"
            " 'headers': {}, 'body': '{}'}, None)\n"
            "print(bad['statusCode'], sorted(app._loaded))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env={"PYTHONPATH": f"{REPO / 'shared'}:{REPO}",
                                        "PATH": "/usr/bin:/bin"}, check=True)
    # An unknown path loads nothing and is the app's 404; a submit loads the jobs
    # feature alone (and is refused here: no credentials).
    assert out.stdout.splitlines() == ["[]", "404 []", "401 ['jobs']"]
