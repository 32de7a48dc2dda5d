"""A workflow definition's JSON schemas do no I/O and burn bounded CPU.

The workflow's ``input_schema`` is applied at run start (gateway) and each step's
``input_schema`` and ``output_schema`` on every step (workflow function, inside the
VPC). A ``$ref`` resolves inside the schema only, ``pattern`` runs on RE2 (linear
time), and a definition whose schemas break these rules is refused when it is saved,
naming the path of the offending keyword.

Checks that could spin a CPU run in a subprocess with a timeout, so that a regression
fails the test instead of holding the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cordum import runtime
from cordum.workflow import engine
from cordum.workflow.definition import Workflow
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.model import StepStatus, WorkflowRun, format_time
from tests.integration.workflow_api import Api, world

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
SECRET = "secret-from-inside-the-vpc"
"""What the schema server answers: it must never reach a problem message."""
EVIL = "^(a+)+$"
"""Exponential on a backtracking engine against ``EVIL_TEXT``."""
EVIL_TEXT = "a" * 40 + "b"
FAST_S = 10.0
"""Generous bound for a check that is linear time or stopped by its budget (a security
bound, not a benchmark): a budget-stopped check spends about a second of CPU, a machine
under load may take a few; an unbounded one would take hours."""
SUBPROCESS_TIMEOUT_S = 10.0
"""A check still running after this long is taken as unbounded."""


@dataclass
class SchemaServer:
    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def schema_server() -> Iterator[SchemaServer]:
    """An HTTP server on loopback that serves a schema holding ``SECRET`` to any GET."""
    served = SchemaServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            served.requests.append(self.path)
            body = json.dumps({"const": SECRET}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def api(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield from world(unique, monkeypatch)


def one_step(step: dict[str, Any], **fields: Any) -> Workflow:
    """A definition as stored (not through save): what a run of an older save meets."""
    return Workflow.model_validate({"id": "wf1", "org_id": "acme", "name": "demo",
                                    "steps": {"fetch": {"topic": "job.fetch", **step}},
                                    **fields})


def new_run() -> WorkflowRun:
    stamp = format_time(NOW)
    return WorkflowRun(id="run-1", workflow_id="wf1", org_id="acme", team_id="blue",
                       input={}, started_at=stamp, created_at=stamp, updated_at=stamp,
                       triggered_by="alice")


def save(api: Api, where: str, schema: dict[str, Any]) -> tuple[int, Any]:
    """POST a definition with ``schema`` at ``where`` (``input_schema`` or
    ``steps.<id>.input_schema|output_schema``)."""
    doc = api.definition()
    if where == "input_schema":
        doc["input_schema"] = schema
    else:
        _, step_id, key = where.split(".")
        doc["steps"][step_id][key] = schema
    status, body, _ = api.call("POST", "/api/v1/workflows", doc)
    return status, body


def in_subprocess(entry: str, value: Any, schema: dict[str, Any]) -> tuple[float, str]:
    """(seconds the check took, its answer) for ``entry`` run in a fresh interpreter:
    ``step`` is ``steps.schema_problem``, ``start`` the gateway's run-start check."""
    code = """
import json, sys, time
value, schema = json.loads(sys.argv[2]), json.loads(sys.argv[3])
if sys.argv[1] == "step":
    from cordum.workflow.steps import schema_problem
    check = lambda: schema_problem(value, schema)
else:
    from cordum.gateway.workflows.service import check_input
    from cordum.workflow.errors import InvalidInput
    def check():
        try:
            check_input(schema, value)
        except InvalidInput as exc:
            return str(exc)
        return ""
check()  # the first call pays for imports and compiling
began = time.monotonic()
answer = check()
print(json.dumps([time.monotonic() - began, answer]))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    try:
        done = subprocess.run([sys.executable, "-c", code, entry, json.dumps(value),
                               json.dumps(schema)], capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT_S, env=env, cwd=ROOT, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {entry} check ran for more than {SUBPROCESS_TIMEOUT_S} s")
    took, answer = json.loads(done.stdout.strip().splitlines()[-1])
    return float(took), str(answer)


# --------------------------------------------------------------------------- no I/O


def test_a_step_schema_ref_to_a_url_is_never_fetched(schema_server):
    """Exploit: a step ``input_schema`` with ``$ref: http://<internal host>/x.json`` made
    the workflow function GET that URL from inside the VPC, and the fetched schema's
    values came back in the step's error message."""
    ref = f"{schema_server.url}/x.json"
    wf = one_step({"input": {"x": 1},
                   "input_schema": {"type": "object", "properties": {"x": {"$ref": ref}}}})
    run = new_run()

    effects = engine.start(run, wf, NOW)

    assert effects.jobs == []
    step = run.steps["fetch"]
    assert step.status == StepStatus.FAILED
    assert step.error is not None and step.error["code"] == "step_input_invalid"
    assert ref in step.error["message"] and "not inside the schema" in step.error["message"]
    assert SECRET not in json.dumps(step.error)
    assert schema_server.requests == []


def test_a_definition_with_a_url_ref_is_refused_on_save(api, schema_server):
    """Exploit: a definition whose step schema ``$ref``s an internal URL was saved, to be
    fetched by every run of it."""
    schema = {"type": "object", "properties": {"x": {"$ref": f"{schema_server.url}/x.json"}}}

    status, body = save(api, "steps.fetch.input_schema", schema)

    assert (status, body.get("code")) == (400, "invalid_json"), body
    assert body["error"].startswith("steps.fetch.input_schema.properties.x.$ref: ")
    assert "not inside the schema" in body["error"]
    assert schema_server.requests == []
    assert api.call("GET", "/api/v1/workflows")[1] == []


def test_a_stored_definition_with_a_url_ref_cannot_start_a_run(api, schema_server):
    """Exploit: a definition stored before save checked its schemas makes the run-start
    input check resolve its ``$ref``: still no request, the start is a 400."""
    wf = Workflow.model_validate({
        "id": api.wf_id(), "org_id": api.tenant, "name": "old",
        "input_schema": {"properties": {"x": {"$ref": f"{schema_server.url}/x.json"}}},
        "steps": {"fetch": {"topic": "job.default"}}})
    runtime.run(DefinitionStore(api.redis).put_definition(wf))

    status, body, _ = api.call("POST", f"/api/v1/workflows/{wf.id}/runs", {"x": 1})

    assert (status, body["code"]) == (400, "invalid_input"), body
    assert "input_schema.properties.x.$ref" in body["error"]
    assert SECRET not in body["error"]
    assert schema_server.requests == [] and api.runner.started == []


# --------------------------------------------------------------------------- dangling refs


def test_a_ref_pointing_nowhere_fails_the_step_instead_of_crashing():
    """Exploit: a ``$ref`` to ``#/definitions/missing`` raised an exception that was
    neither ValidationError nor SchemaError out of ``schema_problem``, crashing the
    workflow function on every delivery of the run's event."""
    dangling = {"type": "object", "properties": {"x": {"$ref": "#/definitions/missing"}}}
    run = new_run()
    wf = one_step({"input": {"x": 1}, "input_schema": dangling})

    engine.start(run, wf, NOW)

    error = run.steps["fetch"].error
    assert error is not None and error["code"] == "step_input_invalid"
    assert "#/definitions/missing" in error["message"]

    # The same schema on the step's output.
    run = new_run()
    wf = one_step({"output_schema": dangling})
    [job] = engine.start(run, wf, NOW).jobs
    engine.on_job(run, wf, "fetch", job.job_id, "SUCCEEDED", output={"x": 1},
                  result_ptr=f"redis://res:{job.job_id}", error=None, now=NOW)
    error = run.steps["fetch"].error
    assert error is not None and error["code"] == "step_output_invalid"
    assert "#/definitions/missing" in error["message"]


def test_a_self_referencing_schema_is_a_problem_not_a_crash():
    """Exploit: ``{"$ref": "#"}`` recursed until RecursionError escaped the step check."""
    from cordum.workflow.steps import schema_problem

    answer = schema_problem({"x": 1}, {"$ref": "#"})

    assert isinstance(answer, str) and answer


@pytest.mark.parametrize(("where", "schema", "path", "words"), [
    ("steps.fetch.output_schema", {"properties": {"x": {"$ref": "#/definitions/missing"}}},
     "steps.fetch.output_schema.properties.x.$ref", "points nowhere"),
    ("input_schema", {"properties": {"x": {"$ref": "file:///etc/passwd"}}},
     "input_schema.properties.x.$ref", "not inside the schema"),
    ("steps.store.input_schema", {"allOf": [{"$ref": "other.json#/a"}]},
     "steps.store.input_schema.allOf[0].$ref", "not inside the schema"),
    ("steps.fetch.input_schema", {"properties": {"name": {"pattern": "^(?=a)"}}},
     "steps.fetch.input_schema.properties.name.pattern", "not supported by RE2"),
    ("steps.fetch.input_schema", {"properties": {"name": {"pattern": "(a)\\1"}}},
     "steps.fetch.input_schema.properties.name.pattern", "not supported by RE2"),
    ("input_schema", {"patternProperties": {"^(?!x)": {}}},
     "input_schema.patternProperties.^(?!x)", "not supported by RE2"),
    ("input_schema", {"unevaluatedProperties": False, "patternProperties": {"^a": {}}},
     "input_schema.unevaluatedProperties", "patternProperties"),
    ("steps.fetch.input_schema", {"type": 12}, "steps.fetch.input_schema.type", ""),
])
def test_a_definition_with_an_unsafe_schema_is_refused_on_save(api, where, schema, path,
                                                               words):
    """Exploit: a definition with a dangling or outside ``$ref``, a pattern that needs a
    backtracking engine, or an invalid schema was saved, and failed (or crashed, or
    fetched, or spun) later on every run."""
    status, body = save(api, where, schema)

    assert (status, body.get("code")) == (400, "invalid_json"), body
    assert body["error"].startswith(path + ": "), body["error"]
    assert words in body["error"]
    assert api.call("GET", "/api/v1/workflows")[1] == []


def test_a_pattern_re2_runs_in_linear_time_is_accepted(api):
    """Not an exploit: ``^(a+)+$`` is refused by no rule, since RE2 matches it in linear
    time; a definition using it saves, and a run start checks its input."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": EVIL}}}
    workflow_id = api.saved(input_schema=schema)

    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs", {"s": "ab"})

    assert (status, body["code"]) == (400, "invalid_input")
    assert body["error"].startswith("input.s: 'ab' does not match")
    assert api.start(workflow_id, {"s": "aaaa"})


# --------------------------------------------------------------------------- bounded CPU


def _branching(depth: int) -> dict[str, Any]:
    """A small schema that a naive validator walks 2**depth times for a failing value."""
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


@pytest.mark.parametrize("entry", ["step", "start"])
@pytest.mark.parametrize(("value", "schema", "expect"), [
    ({"s": EVIL_TEXT}, {"properties": {"s": {"pattern": EVIL}}}, "does not match"),
    ({EVIL_TEXT: 1}, {"patternProperties": {EVIL: {"type": "string"}}}, ""),
    ({EVIL_TEXT: 1}, {"additionalProperties": False, "patternProperties": {EVIL: {}}},
     "does not match any of the regexes"),
    ({EVIL_TEXT: 1}, {"unevaluatedProperties": False, "patternProperties": {EVIL: {}}},
     "unevaluatedProperties"),
    (1, _branching(30), "stopped"),
], ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties",
        "branching-refs"])
def test_a_schema_check_is_bounded_in_cpu(entry, value, schema, expect):
    """Exploit: a backtracking ``pattern`` (``^(a+)+$`` against 'a'*40+'b', on Python's
    ``re``) or refs that branch exponentially held the workflow function (a step check)
    or the gateway (the run-start check) until its timeout."""
    took, answer = in_subprocess(entry, value, schema)

    assert took < FAST_S, f"the check took {took:.2f} s"
    assert expect in answer
    assert bool(answer) == bool(expect)


def test_a_problem_is_bounded_in_length():
    """Exploit: a problem quoted the whole offending value, so a large step payload came
    back (into the run's timeline and error) at full size."""
    from cordum.workflow.steps import schema_problem

    answer = schema_problem("x" * 100_000, {"type": "integer"})

    assert answer.startswith("'xxx") and len(answer) <= 400
