"""Who submitted a job and who decides about it come from the authenticated key only.

Finding 2: a submitter could name another principal in the body and then
approve the job herself, and a key without ``principal_id`` was never checked
for self-approval at all. Cancel had no role check.

Jobs are gated as production gates them: the gateway's submit-time check asks
a real safety kernel, whose example policy sends ``job.echo.approval`` to approval.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cordum import runtime
from cordum.gateway.core.auth import key_id
from cordum.store.indexes import JobIndexes
from tests.helpers import call, event, forget_jobs
from tests.security.conftest import ALICE, BOB, KEYS, configure, meta_of

CONFIG = Path(__file__).resolve().parents[2] / "config"
GATED_TOPIC = "job.echo.approval"
NAMELESS = "nameless-admin-key-0123456789"
"""An admin key of tenant default without a principal_id (as `make up` used to write)."""
VIEWER = "viewer-key-0123456789"


@pytest.fixture
def jobs(gateway, kernel, monkeypatch):
    """The gateway asking the kernel at submit; the jobs a test made are forgotten after it."""
    keys = [*KEYS,
            {"key": NAMELESS, "tenant": "default", "role": "admin"},
            {"key": VIEWER, "tenant": "default", "role": "viewer", "principal_id": "vic"}]
    configure(monkeypatch, keys, CORDUM_SUBMIT_POLICY_CHECK="on", SAFETY_KERNEL_ADDR=kernel,
              CORDUM_SAFETY_TIMEOUT_S="1")
    made: list[str] = []
    yield made
    runtime.run(forget(made))


async def forget(job_ids: list[str]) -> None:
    await forget_jobs(runtime.redis_client(), job_ids)


def submit(made: list[str], key: str, topic: str = GATED_TOPIC,
           **extra: str) -> tuple[int, dict]:
    status, body, _ = call(event("POST", "/api/v1/jobs",
                                 {"topic": topic, "prompt": "hi", **extra}, key=key))
    if isinstance(body, dict) and body.get("job_id"):
        made.append(body["job_id"])
    return status, body


def decide(job_id: str, verb: str, key: str) -> tuple[int, dict]:
    status, body, _ = call(event("POST", f"/api/v1/approvals/{job_id}/{verb}",
                                 {"reason": "reviewed"}, key=key))
    return status, body


def test_a_body_principal_id_cannot_name_another_submitter(jobs):
    # Given alice, an admin, names bob as the submitter in the body
    status, body = submit(jobs, ALICE, principal_id="bob")
    # Then the job is refused before anything is stored
    assert (status, body.get("code")) == (403, "principal_mismatch"), body
    assert not jobs
    # And naming herself, or nobody, records her own identity
    for extra in ({"principal_id": "alice"}, {}):
        status, body = submit(jobs, ALICE, **extra)
        assert status == 200 and body["status"] == "approval_required", body
        assert meta_of(body["job_id"])["principal"] == "alice"
        req = runtime.run(JobIndexes(runtime.redis_client()).get_request(body["job_id"]))
        assert req is not None and req.principal_id == "alice"
    # And she cannot approve her own job
    assert decide(jobs[-1], "approve", ALICE)[1]["code"] == "self_approval_denied"


def test_a_key_without_principal_id_cannot_decide_its_own_job(jobs):
    # Given a job submitted by an admin key that names no principal
    status, body = submit(jobs, NAMELESS)
    assert status == 200 and body["status"] == "approval_required", body
    job_id = body["job_id"]
    # When the same key approves or rejects it
    for verb in ("approve", "reject"):
        status, out = decide(job_id, verb, NAMELESS)
        # Then it is refused: the key itself is the identity
        assert (status, out.get("code")) == (403, "self_approval_denied"), (verb, out)
    meta = meta_of(job_id)
    assert meta["state"] == "APPROVAL_REQUIRED"
    assert meta["principal"] == f"key:{key_id(NAMELESS)}"
    # And another identity may approve it, and is recorded as the approver
    status, out = decide(job_id, "approve", ALICE)
    assert status == 200, out
    assert meta_of(job_id)["approved_by"] == "alice"


def test_cancel_needs_a_submitting_role(jobs):
    # Given a running job of the tenant
    status, body = submit(jobs, ALICE, topic="job.default")
    assert status == 200, body
    job_id = body["job_id"]
    # When a viewer cancels it
    status, out, _ = call(event("POST", f"/api/v1/jobs/{job_id}/cancel", key=VIEWER))
    # Then it is refused and the job goes on
    assert (status, out.get("code")) == (403, "forbidden"), out
    assert meta_of(job_id)["state"] != "CANCELLED"
    # And a user may cancel it
    status, out, _ = call(event("POST", f"/api/v1/jobs/{job_id}/cancel", key=BOB))
    assert (status, out["state"]) == (200, "CANCELLED"), out
