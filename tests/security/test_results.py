"""A JobResult is a bus message anyone can publish: its pointer and its worker are
checked against what is stored before it changes anything.

The result pointer used to be stored for any status and served as it was, so a
result could make the API serve any Redis key (another tenant's job context,
another job's result); and a result from a worker other than the job's was applied.
"""

from __future__ import annotations

import pytest

from cordum import protocol
from tests.security.conftest import CAROL, meta_of
from tests.security.result_path import ResultPath

SECRET = "acme quarterly numbers: 4711"


@pytest.fixture
def path(gateway, output_kernel):
    world = ResultPath(output_kernel)
    yield world
    world.close()


def victim(path: ResultPath) -> str:
    """Another tenant's job: its context holds a secret, and so does its result."""
    job_id = path.submit(SECRET, key=CAROL)
    path.write_result(job_id, f'{{"answer": "{SECRET}"}}')
    return job_id


@pytest.mark.parametrize("target", ["context", "result", "meta"])
def test_result_pointing_at_another_jobs_key_is_dropped(path, target):
    other = victim(path)
    # Given a job of ALICE's running on the worker
    job_id = path.submit("harmless")
    path.dispatch(job_id)
    # When a result for it points at a key of another job
    ptr = {"context": protocol.pointer(protocol.context_key(other)),
           "result": protocol.pointer(protocol.result_key(other)),
           "meta": f"redis://job:meta:{other}"}[target]
    outcome = path.report(job_id, ptr)
    # Then the API never answers the other job's data as this job's result
    body, text = path.detail(job_id)
    assert SECRET not in text
    assert body["result"] is None and body["result_ptr"] is None
    # And the result was dropped: the job is still running, with no pointer
    assert outcome.action == "dropped", outcome
    meta = meta_of(job_id)
    assert meta["state"] == "RUNNING" and not meta.get("result_ptr")


def test_worker_cannot_point_at_the_platforms_redacted_copy(path):
    # res:<id>:redacted is written by the output policy alone.
    job_id = path.submit("harmless")
    path.dispatch(job_id)
    path.write_result(job_id + ":redacted", f"unscanned {SECRET}")
    outcome = path.report(job_id, protocol.pointer(protocol.result_key(job_id) + ":redacted"))
    body, text = path.detail(job_id)
    assert SECRET not in text
    assert body["state"] == "RUNNING" and outcome.action == "dropped", outcome


def test_failed_result_with_a_foreign_pointer_is_not_served(path):
    other = victim(path)
    job_id = path.submit("harmless")
    path.dispatch(job_id)
    # A failure report carries a pointer too, and used to be stored unchecked.
    outcome = path.report(job_id, protocol.pointer(protocol.context_key(other)),
                          status=protocol.JobStatus.JOB_STATUS_FAILED)
    body, text = path.detail(job_id)
    assert SECRET not in text
    assert body["result"] is None and body["result_ptr"] is None
    assert body["state"] == "RUNNING" and outcome.action == "dropped", outcome


def test_failed_results_own_output_is_not_served(path):
    # Only SUCCEEDED output goes through the output checks: a failure's is never served.
    job_id = path.submit("harmless")
    path.dispatch(job_id)
    ptr = path.write_result(job_id, f"stack trace with {SECRET}")
    outcome = path.report(job_id, ptr, status=protocol.JobStatus.JOB_STATUS_FAILED)
    assert (outcome.action, outcome.state) == ("recorded", "FAILED")
    body, text = path.detail(job_id)
    assert body["state"] == "FAILED"
    assert body["result"] is None and body["result_ptr"] is None and SECRET not in text


def test_result_from_another_worker_is_dropped(path):
    # Given a job dispatched to worker A
    job_id = path.submit("harmless")
    path.dispatch(job_id)
    ptr = path.write_result(job_id, '{"answer": "forged"}')
    # When worker B reports it finished
    outcome = path.report(job_id, ptr, worker=f"intruder-{path.unique}")
    # Then nothing changes: the job is still RUNNING on A
    meta = meta_of(job_id)
    assert meta["state"] == "RUNNING" and meta["worker_id"] == path.worker
    assert path.detail(job_id)[0]["result"] is None
    assert outcome.action == "dropped", outcome
    # And A's own result is still taken
    path.write_result(job_id, '{"answer": "real"}')
    assert path.report(job_id, ptr).state == "SUCCEEDED"
    assert path.detail(job_id)[0]["result"] == {"answer": "real"}


@pytest.mark.parametrize("status", [protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                    protocol.JobStatus.JOB_STATUS_FAILED],
                         ids=["succeeded", "failed"])
def test_result_for_a_job_never_dispatched_is_dropped(path, status):
    # Given a job waiting for a worker: no worker of record yet
    job_id = path.submit("harmless")
    assert meta_of(job_id)["state"] == "PENDING"
    # When anyone on the bus reports it over (an approval gate job finished this way
    # would let a workflow pass its gate unapproved)
    outcome = path.report(job_id, status=status, worker=f"forger-{path.unique}")
    # Then nothing changes
    assert outcome.action == "dropped", outcome
    assert meta_of(job_id)["state"] == "PENDING"
