"""The workflow API on the real Redis: saving, reading and deleting definitions, and
starting runs (API Gateway proxy events into the gateway).

The runner is the real one with ``announce_start`` recorded instead of queued, so a
started run stays ``pending`` where the test can look at it.
"""

from __future__ import annotations

import time

import pytest

from cordum import config, runtime
from cordum.workflow import keys
from cordum.workflow.model import RunStatus
from tests import helpers
from tests.integration.workflow_api import OUTSIDER, VIEWER, WRITER, is_rfc3339, world


@pytest.fixture
def api(unique, monkeypatch):
    yield from world(unique, monkeypatch)


# --------------------------------------------------------------------------- definitions


def test_a_saved_definition_reads_back_in_its_tenant_only(api):
    workflow_id = api.saved(description="two steps", timeout_sec=60)
    status, wf, _ = api.call("GET", f"/api/v1/workflows/{workflow_id}", key=VIEWER)
    assert status == 200
    assert (wf["id"], wf["name"], wf["org_id"], wf["created_by"]) == \
        (workflow_id, "the flow", api.tenant, "ada")
    assert (wf["description"], wf["timeout_sec"]) == ("two steps", 60)
    assert is_rfc3339(wf["created_at"]) and wf["updated_at"] == wf["created_at"]
    assert wf["steps"]["store"]["id"] == "store" and wf["steps"]["store"]["type"] == "worker"
    assert wf["steps"]["store"]["depends_on"] == ["fetch"]
    assert None not in wf.values()  # cordum-sdk cannot parse "config": null
    status, listed, _ = api.call("GET", "/api/v1/workflows", key=VIEWER)
    assert status == 200 and [w["id"] for w in listed] == [workflow_id]
    # Another tenant neither reads nor lists nor deletes it.
    assert api.call("GET", f"/api/v1/workflows/{workflow_id}", key=OUTSIDER)[:2] == \
        (404, {"error": "workflow not found", "code": "not_found", "status": 404})
    assert api.call("GET", "/api/v1/workflows", key=OUTSIDER)[:2] == (200, [])
    assert api.call("DELETE", f"/api/v1/workflows/{workflow_id}", key=OUTSIDER)[0] == 404
    assert api.call("GET", f"/api/v1/workflows/{workflow_id}")[0] == 200


def test_a_definition_as_cordum_sdk_sends_it_is_accepted(api):
    # Steps as a list, each with its id, a "config" the client adds, retry as
    # {max_attempts, backoff_sec}; no workflow id: the server makes one.
    sdk_shaped = {"name": "sdk", "steps": [
        {"id": "one", "type": "job", "config": {}, "retry": {"max_attempts": 3,
                                                            "backoff_sec": 2}},
        {"id": "two", "type": "job", "depends_on": ["one"], "config": {}}]}
    status, body, _ = api.call("POST", "/api/v1/workflows", sdk_shaped)
    assert status == 201 and set(body) == {"id"} and body["id"]
    wf = api.call("GET", f"/api/v1/workflows/{body['id']}")[1]
    assert sorted(wf["steps"]) == ["one", "two"]
    assert wf["steps"]["one"]["retry"]["max_retries"] == 2
    assert wf["steps"]["one"]["retry"]["initial_backoff_sec"] == 2
    api.call("DELETE", f"/api/v1/workflows/{body['id']}")


def test_saving_again_replaces_the_definition_but_keeps_its_creation(api):
    workflow_id = api.saved()
    first = api.call("GET", f"/api/v1/workflows/{workflow_id}")[1]
    time.sleep(0.002)
    again = {**api.definition(), "name": "renamed"}
    assert api.call("POST", "/api/v1/workflows", again, key=WRITER)[:2] == \
        (201, {"id": workflow_id})
    second = api.call("GET", f"/api/v1/workflows/{workflow_id}")[1]
    assert second["name"] == "renamed"
    assert (second["created_at"], second["created_by"]) == \
        (first["created_at"], first["created_by"])
    assert second["updated_at"] > first["updated_at"]
    assert len(api.call("GET", "/api/v1/workflows")[1]) == 1


@pytest.mark.parametrize(("change", "words"), [
    ({"colour": "blue"}, "unknown field colour"),
    ({"steps": {"a": {"depends_on": ["b"]}, "b": {"depends_on": ["a"]}}}, "cycle"),
    ({"steps": {"a": {"depends_on": ["missing"]}}}, "is not a step"),
    ({"steps": {"bad id": {}}}, "step id"),
    ({"timeout_sec": 604801}, "timeout_sec"),
    ({"steps": {"a": {"policy_gate": "maybe"}}}, "policy_gate"),
])
def test_an_invalid_definition_is_refused(api, change, words):
    status, body, _ = api.call("POST", "/api/v1/workflows", {**api.definition(), **change})
    assert (status, body["code"], body["status"]) == (400, "invalid_json", 400)
    assert words in body["error"]
    assert api.call("GET", "/api/v1/workflows")[1] == []


def test_malformed_and_oversized_bodies(api, monkeypatch):
    assert api.call("POST", "/api/v1/workflows", "{")[1]["code"] == "invalid_json"
    assert api.call("POST", "/api/v1/workflows", "[]")[0] == 400
    assert api.call("POST", "/api/v1/workflows")[0] == 400
    monkeypatch.setenv("CORDUM_MAX_BODY_BYTES", "2000")
    huge = api.definition(description="x" * 3000)
    assert api.call("POST", "/api/v1/workflows", huge)[:2] == (413, {
        "error": "request body larger than 2000 bytes (CORDUM_MAX_BODY_BYTES)",
        "code": "payload_too_large", "status": 413})
    workflow_id = api.saved()
    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs",
                               {"blob": "x" * 3000})
    assert (status, body["code"]) == (413, "payload_too_large")
    assert api.runner.started == []


def test_deleting_a_definition(api):
    workflow_id = api.saved()
    status, body, _ = api.call("DELETE", f"/api/v1/workflows/{workflow_id}", key=WRITER)
    assert (status, body) == (204, "")
    assert api.call("GET", f"/api/v1/workflows/{workflow_id}")[0] == 404
    assert api.call("DELETE", f"/api/v1/workflows/{workflow_id}")[0] == 404
    assert api.call("GET", "/api/v1/workflows")[1] == []


def test_a_viewer_reads_but_changes_nothing(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    forbidden = (403, {"error": "forbidden", "code": "forbidden", "status": 403})
    for method, path in (("POST", "/api/v1/workflows"),
                         ("DELETE", f"/api/v1/workflows/{workflow_id}"),
                         ("POST", f"/api/v1/workflows/{workflow_id}/runs"),
                         ("POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel"),
                         ("DELETE", f"/api/v1/workflow-runs/{run_id}")):
        assert api.call(method, path, {}, key=VIEWER)[:2] == forbidden, (method, path)
    for path in (f"/api/v1/workflows/{workflow_id}", "/api/v1/workflows",
                 f"/api/v1/workflows/{workflow_id}/runs", "/api/v1/workflow-runs",
                 f"/api/v1/workflow-runs/{run_id}", f"/api/v1/workflow-runs/{run_id}/timeline"):
        assert api.call("GET", path, key=VIEWER)[0] == 200, path
    assert len(api.runner.started) == 1 and api.runner.cancelled == []
    assert api.run(run_id).status == RunStatus.PENDING


def test_no_credential_is_401(api):
    status, body, _ = helpers.call(helpers.event("GET", "/api/v1/workflows",
                                                 tenant=api.tenant))
    assert (status, body["code"]) == (401, "unauthorized")


# --------------------------------------------------------------------------- starting runs


def test_a_started_run_is_stored_pending_and_its_start_announced(api):
    workflow_id = api.saved()
    status, body, headers = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                     {"city": "Oslo"}, key=WRITER)
    assert status == 200 and set(body) == {"run_id"}
    run_id = body["run_id"]
    assert headers["X-Trace-Id"] == run_id
    assert [r.id for r in api.runner.started] == [run_id]
    status, run, _ = api.call("GET", f"/api/v1/workflow-runs/{run_id}", key=VIEWER)
    assert status == 200
    assert (run["id"], run["workflow_id"], run["org_id"], run["status"]) == \
        (run_id, workflow_id, api.tenant, "pending")
    assert run["input"] == {"city": "Oslo"}
    assert (run["triggered_by"], run["created_by"]) == ("wes", "wes")
    assert is_rfc3339(run["started_at"]) and run["started_at"] == run["created_at"]
    assert run["completed_at"] is None and run["timers"] == [] and run["steps"] == {}
    assert run["dry_run"] is False
    # The run counts against the tenant's open runs and is on the reconciler's list.
    assert runtime.run(api.redis.sismember(keys.active_runs_key(api.tenant), run_id))
    assert runtime.run(api.redis.zscore(keys.OPEN_RUNS_KEY, run_id)) is not None


def test_an_empty_body_is_an_empty_input(api):
    workflow_id = api.saved()
    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs")
    assert status == 200
    assert api.run(body["run_id"]).input == {}


@pytest.mark.parametrize("header", ["Idempotency-Key", "X-Idempotency-Key"])
def test_a_start_sent_twice_with_one_key_is_one_run(api, header):
    workflow_id = api.saved()
    key = {header: f"order-{api.unique}"}
    first = api.start(workflow_id, {"n": 1, "tags": ["a"]}, headers=key)
    # The same body in another key order is the same request.
    again = api.start(workflow_id, {"tags": ["a"], "n": 1}, headers=key)
    assert again == first
    assert [r.id for r in api.runner.started] == [first]
    assert api.run(first).idempotency_key == f"order-{api.unique}"
    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs", {"n": 2},
                               headers=key)
    assert (status, body) == (409, {
        "error": "idempotency key already used with a different request body",
        "code": "RUN_IDEMPOTENCY_CONFLICT", "status": 409})
    # Without a key every start is a run of its own; another tenant's key is its own.
    assert api.start(workflow_id, {"n": 1}) != first
    assert len(api.runner.started) == 2


def test_an_unusable_idempotency_key_is_400(api):
    workflow_id = api.saved()
    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs", {},
                               headers={"Idempotency-Key": "k" * 600})
    assert (status, body["error"]) == (400, "Idempotency-Key: at most 512 bytes")


def test_the_input_is_checked_against_the_input_schema(api):
    schema = {"type": "object", "required": ["n"],
              "properties": {"n": {"type": "integer"},
                             "items": {"type": "array", "items": {"type": "string"}}}}
    workflow_id = api.saved(input_schema=schema)
    path = f"/api/v1/workflows/{workflow_id}/runs"
    cases = [({}, "input: 'n' is a required property"),
             ({"n": "one"}, "input.n: 'one' is not of type 'integer'"),
             ({"n": 1, "items": ["a", 2]}, "input.items[1]: 2 is not of type 'string'")]
    for body, message in cases:
        assert api.call("POST", path, body)[:2] == \
            (400, {"error": message, "code": "invalid_input", "status": 400})
    assert api.runner.started == []
    assert api.start(workflow_id, {"n": 1})


def test_a_remote_schema_reference_is_not_fetched(api):
    # Refused when saved (tests/security/test_workflow_schemas.py covers run starts of
    # definitions stored before that check).
    schema = {"type": "object", "properties": {"n": {"$ref": "http://127.0.0.1:9/n.json"}}}
    status, body, _ = api.call("POST", "/api/v1/workflows", api.definition(input_schema=schema))
    assert (status, body["code"]) == (400, "invalid_json")
    assert body["error"] == ("input_schema.properties.n.$ref: 'http://127.0.0.1:9/n.json' "
                             "is not inside the schema (references are never fetched)")


def test_an_unknown_or_foreign_workflow_cannot_be_started(api):
    workflow_id = api.saved()
    not_found = (404, {"error": "workflow not found", "code": "not_found", "status": 404})
    assert api.call("POST", f"/api/v1/workflows/{api.wf_id('none')}/runs", {})[:2] == \
        not_found
    assert api.call("POST", f"/api/v1/workflows/{workflow_id}/runs", {},
                    key=OUTSIDER)[:2] == not_found
    assert api.runner.started == []


def test_the_tenants_open_run_limit_is_429(api, monkeypatch):
    monkeypatch.setenv("CORDUM_WORKFLOW_MAX_ACTIVE_RUNS", "1")
    config.settings.cache_clear()
    workflow_id = api.saved()
    first = api.start(workflow_id)
    status, body, headers = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs", {})
    assert (status, body["code"], body["retryable"]) == (429, "RUN_NOT_RUNNABLE", True)
    assert headers["Retry-After"] == "1"
    # Once the open run ends, another may start.
    api.finish(first)
    assert api.start(workflow_id) != first


def test_a_start_not_queued_still_answers_its_stored_run(api):
    # The run is stored pending; the reconciler starts it.
    api.runner.fail_start = True
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    assert api.run(run_id).status == RunStatus.PENDING
    assert runtime.run(api.redis.zscore(keys.OPEN_RUNS_KEY, run_id)) is not None
