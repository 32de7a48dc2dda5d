"""Finding 3: output the policy did not pass is served by GET /api/v1/jobs/{id}.

A quarantined job kept its result pointer and the API served it; a SUCCEEDED job
was served before its content scan decided; a result longer than the content
check reads was served with its tail unscanned.
"""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.gateway.core.auth import Principal
from cordum.gateway.jobs import deps
from cordum.safety.output_wire import MAX_CONTENT_BYTES
from tests.security.conftest import configure, meta_of
from tests.security.result_path import PRIVATE_KEY, ResultPath


@pytest.fixture
def path(gateway, output_kernel, monkeypatch):
    # As deployed: every function, the gateway too, runs with the output policy on.
    configure(monkeypatch, OUTPUT_POLICY_ENABLED="true")
    world = ResultPath(output_kernel, output=True)
    yield world
    world.close()


@pytest.mark.parametrize(("topic", "output", "phase"), [
    ("job.blocked", "ordinary output of a blocked topic", "sync"),
    ("job.default", f"here it is: {PRIVATE_KEY}", "async"),
])
def test_quarantined_output_is_not_served(path, topic, output, phase):
    # Given a job whose worker reported output the policy quarantines
    job_id = path.submit("write something", topic)
    path.dispatch(job_id)
    path.report(job_id, path.write_result(job_id, output))
    meta = meta_of(job_id)
    assert meta["state"] == "OUTPUT_QUARANTINED"
    assert json.loads(meta["output_safety"])["phase"] == phase
    # When its submitter reads it
    body, text = path.detail(job_id)
    # Then neither the output nor where it lies is answered, and the meta keeps no pointer
    assert body["state"] == "OUTPUT_QUARANTINED"
    assert body["result"] is None and body["result_ptr"] is None, body
    assert output not in text
    assert not meta.get("result_ptr")


def test_output_is_not_served_before_the_content_scan_decides(
        gateway, output_kernel, monkeypatch):
    configure(monkeypatch, OUTPUT_POLICY_ENABLED="true")
    seen: dict[str, dict] = {}
    alice = Principal(tenant="default", role="admin", principal_id="alice")

    async def look(job_id: str) -> None:
        # The metadata check passed; the content is being scanned.
        seen[job_id] = await deps.jobs().get(alice, job_id)

    world = ResultPath(output_kernel, output=True, during=look)
    try:
        # Given a job whose content scan has not decided yet
        job_id = world.submit("write something")
        world.dispatch(job_id)
        output = f"the scan would find {PRIVATE_KEY}"
        world.report(job_id, world.write_result(job_id, output))
        during = seen[job_id]
        # It is not SUCCEEDED yet: the state is written with the scan's decision
        assert during["state"] == "RUNNING"
        # Then what was answered meanwhile holds neither the output nor its pointer
        assert during["result"] is None and during["result_ptr"] is None, during
        assert output not in json.dumps(during)
        # And the scan's quarantine is what stands afterwards
        body, text = world.detail(job_id)
        assert body["state"] == "OUTPUT_QUARANTINED" and output not in text
    finally:
        world.close()


def test_output_past_the_scan_limit_is_quarantined_when_fail_closed(path):
    # Given a result whose harmful part lies past what the content check reads
    job_id = path.submit("write a lot")
    path.dispatch(job_id)
    output = "x" * MAX_CONTENT_BYTES + PRIVATE_KEY
    path.report(job_id, path.write_result(job_id, output))
    # Then the unscanned tail follows the fail mode (closed): quarantined, not served
    meta = meta_of(job_id)
    assert meta["state"] == "OUTPUT_QUARANTINED", meta.get("output_safety")
    record = json.loads(meta["output_safety"])
    assert record["quarantined"] and "scan limit" in record["reason"]
    body, text = path.detail(job_id)
    assert body["result"] is None and body["result_ptr"] is None
    assert PRIVATE_KEY not in text
    assert runtime.run(path.redis.exists(f"res:{job_id}")) == 1  # kept for operators
