"""The workflow API on the real Redis: listing and reading runs, cancelling and deleting
them (API Gateway proxy events into the gateway).

The runner is the real one with ``announce_start`` recorded instead of queued, so a
started run stays ``pending`` where the test can look at it; cancel goes
through the real runner (run lock, engine, store).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from cordum import runtime
from cordum.workflow import keys
from cordum.workflow.model import RunStatus, TimelineEvent, format_time
from tests.integration.workflow_api import OUTSIDER, VIEWER, WRITER, is_rfc3339, world


@pytest.fixture
def api(unique, monkeypatch):
    yield from world(unique, monkeypatch)


# --------------------------------------------------------------------------- reading runs


def test_runs_are_listed_newest_first_and_paged(api):
    flow, other = api.saved("flow"), api.saved("other")
    ids = []
    for n in range(3):
        ids.append(api.start(flow, {"n": n}))
        time.sleep(0.002)  # distinct update times
    lone = api.start(other)
    status, runs, _ = api.call("GET", f"/api/v1/workflows/{flow}/runs", key=VIEWER)
    assert status == 200 and [r["id"] for r in runs] == ids[::-1]
    assert set(runs[0]) >= {"id", "workflow_id", "status", "started_at", "completed_at"}
    assert "input" not in runs[0] and "context" not in runs[0]
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page, _ = api.call("GET", "/api/v1/workflow-runs", query=query)
        assert status == 200
        seen += [r["id"] for r in page["items"]]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert seen == [lone, *ids[::-1]] and pages == 2
    by_flow = api.call("GET", "/api/v1/workflow-runs", query={"workflow_id": other})[1]
    assert [r["id"] for r in by_flow["items"]] == [lone]
    api.finish(ids[0])
    done = api.call("GET", "/api/v1/workflow-runs", query={"status": "succeeded"})[1]
    assert [r["id"] for r in done["items"]] == [ids[0]] and done["next_cursor"] is None
    assert api.call("GET", "/api/v1/workflow-runs", key=OUTSIDER)[1] == \
        {"items": [], "next_cursor": None}
    assert api.call("GET", f"/api/v1/workflows/{flow}/runs", key=OUTSIDER)[0] == 404


def test_runs_listed_after_and_before_a_time(api):
    workflow_id = api.saved()
    early = api.start(workflow_id)
    time.sleep(0.01)
    cut = format_time(datetime.now(UTC))
    time.sleep(0.01)
    late = api.start(workflow_id)
    after = api.call("GET", "/api/v1/workflow-runs", query={"updated_after": cut})[1]
    before = api.call("GET", "/api/v1/workflow-runs", query={"updated_before": cut})[1]
    assert [r["id"] for r in after["items"]] == [late]
    assert [r["id"] for r in before["items"]] == [early]


@pytest.mark.parametrize(("query", "code"), [
    ({"status": "finished"}, "invalid_request"),
    ({"cursor": "not-a-cursor"}, "invalid_input"),
    ({"limit": "0"}, "invalid_request"),
    ({"updated_after": "yesterday"}, "invalid_request"),
])
def test_bad_run_list_queries_are_400(api, query, code):
    status, body, _ = api.call("GET", "/api/v1/workflow-runs", query=query)
    assert (status, body["code"]) == (400, code)


def test_a_definitions_runs_outlive_it(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    api.call("DELETE", f"/api/v1/workflows/{workflow_id}")
    runs = api.call("GET", f"/api/v1/workflows/{workflow_id}/runs")[1]
    assert [r["id"] for r in runs] == [run_id]
    assert api.call("GET", f"/api/v1/workflows/{api.wf_id('never')}/runs")[:2] == \
        (404, {"error": "workflow not found", "code": "not_found", "status": 404})


def test_a_run_shows_its_pending_timer(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    fires_at = time.time() + 60
    runtime.run(api.store.save(api.run(run_id), timeline=[], outbox=None, timer_at=fires_at))
    run = api.call("GET", f"/api/v1/workflow-runs/{run_id}")[1]
    (timer,) = run["timers"]
    assert (timer["workflow_id"], timer["run_id"]) == (workflow_id, run_id)
    assert is_rfc3339(timer["fires_at"])
    assert abs(datetime.fromisoformat(timer["fires_at"]).timestamp() - fires_at) < 0.001
    assert 55_000 < timer["remaining_ms"] <= 60_000


def test_a_runs_timeline_oldest_first(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    stamps = [format_time(datetime.now(UTC)) for _ in range(2)]
    events = [TimelineEvent(time=stamps[0], type="run_status", run_id=run_id,
                            workflow_id=workflow_id, status="running"),
              TimelineEvent(time=stamps[1], type="step_dispatched", run_id=run_id,
                            workflow_id=workflow_id, step_id="fetch",
                            job_id=f"{run_id}:fetch@1", data={"attempt": 1})]
    runtime.run(api.store.save(api.run(run_id), timeline=events, outbox=None))
    status, timeline, _ = api.call("GET", f"/api/v1/workflow-runs/{run_id}/timeline",
                                   key=VIEWER)
    assert status == 200
    assert [(e["type"], e["timestamp"], e["time"]) for e in timeline] == \
        [("run_status", stamps[0], stamps[0]), ("step_dispatched", stamps[1], stamps[1])]
    assert timeline[1]["job_id"] == f"{run_id}:fetch@1" and timeline[1]["data"] == \
        {"attempt": 1}
    assert api.call("GET", f"/api/v1/workflow-runs/{run_id}/timeline", key=OUTSIDER)[:2] == \
        (404, {"error": "run not found", "code": "not_found", "status": 404})


def test_another_tenants_run_is_not_found(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    for method, path in (("GET", f"/api/v1/workflow-runs/{run_id}"),
                         ("GET", f"/api/v1/workflow-runs/{run_id}/timeline"),
                         ("DELETE", f"/api/v1/workflow-runs/{run_id}"),
                         ("POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel")):
        assert api.call(method, path, key=OUTSIDER)[:2] == \
            (404, {"error": "run not found", "code": "not_found", "status": 404}), path
    assert api.runner.cancelled == []
    assert api.run(run_id).status == RunStatus.PENDING
    assert api.call("GET", "/api/v1/workflow-runs/no-such-run")[0] == 404


# --------------------------------------------------------------------------- cancel, delete


def test_cancelling_a_run(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    path = f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel"
    assert api.call("POST", path, key=WRITER)[:2] == (204, "")
    run = api.call("GET", f"/api/v1/workflow-runs/{run_id}")[1]
    assert run["status"] == "cancelled" and is_rfc3339(run["completed_at"])
    assert not runtime.run(api.redis.sismember(keys.active_runs_key(api.tenant), run_id))
    # Cancelling it again changes nothing and is no error.
    assert api.call("POST", path)[:2] == (204, "")
    assert api.call("GET", f"/api/v1/workflow-runs/{run_id}")[1]["completed_at"] == \
        run["completed_at"]
    # The run must be the named workflow's.
    other = api.call("POST", f"/api/v1/workflows/{api.wf_id('else')}/runs/{run_id}/cancel")
    assert other[0] == 404


def test_a_run_being_advanced_cannot_be_cancelled_now(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    # Another writer (the workflow function) holds the run's lock.
    runtime.run(api.redis.set(keys.run_lock_key(run_id), "someone-else", px=30_000))
    status, body, headers = api.call(
        "POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel")
    assert (status, body["code"], body["retryable"]) == (409, "RUN_NOT_CANCELLABLE", True)
    assert headers["Retry-After"] == "1"
    assert api.call("DELETE", f"/api/v1/workflow-runs/{run_id}")[1]["code"] == \
        "RUN_NOT_CANCELLABLE"
    assert api.run(run_id).status == RunStatus.PENDING
    runtime.run(api.redis.delete(keys.run_lock_key(run_id)))


def test_deleting_a_finished_run(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id, headers={"Idempotency-Key": f"del-{api.unique}"})
    api.finish(run_id)
    assert api.call("DELETE", f"/api/v1/workflow-runs/{run_id}", key=WRITER)[:2] == (204, "")
    assert api.runner.cancelled == []
    assert api.call("GET", f"/api/v1/workflow-runs/{run_id}")[0] == 404
    assert api.call("GET", f"/api/v1/workflow-runs/{run_id}/timeline")[0] == 404
    assert api.call("DELETE", f"/api/v1/workflow-runs/{run_id}")[0] == 404
    assert api.call("GET", "/api/v1/workflow-runs")[1]["items"] == []
    # The key no longer names the deleted run: the same request starts a new one.
    again = api.start(workflow_id, headers={"Idempotency-Key": f"del-{api.unique}"})
    assert again != run_id


def test_deleting_an_open_run_cancels_it_first(api):
    workflow_id = api.saved()
    run_id = api.start(workflow_id)
    assert api.call("DELETE", f"/api/v1/workflow-runs/{run_id}")[:2] == (204, "")
    assert api.runner.cancelled == [(api.tenant, run_id)]
    assert api.call("GET", f"/api/v1/workflow-runs/{run_id}")[0] == 404
    assert not runtime.run(api.redis.sismember(keys.active_runs_key(api.tenant), run_id))
    assert runtime.run(api.redis.zscore(keys.OPEN_RUNS_KEY, run_id)) is None
