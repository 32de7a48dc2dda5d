"""A job request from the bus is checked against the job stored under its id.

Finding: a ``sys.job.submit`` packet that reused an existing job id was applied
to that job: every transition wrote the packet's tenant and topic over the
stored ones, so one tenant could take over (or fail) another tenant's job.

The job is stored by the gateway, as in production; the packet goes through
the submit function's batch handling, so the test sees what SQS would: a
refused record is reported failed (not deleted), and the redrive moves it to
the queue's DLQ.
"""

from __future__ import annotations

import base64

import pytest
from google.protobuf import json_format

from cordum import protocol, runtime
from cordum.lambdas.sqs_batch import VisibilityDelayer
from cordum.scheduler.batch import process_batch
from cordum.scheduler.errors import UnparseableRecord
from tests.helpers import call, event
from tests.security.conftest import CAROL, meta_of
from tests.security.scheduler_stack import TOPIC, Scheduler


@pytest.fixture
def stack(gateway, kernel):
    s = Scheduler(kernel)
    runtime.run(s.add_worker())
    yield s
    runtime.run(s.cleanup())


def carols_job(s: Scheduler) -> str:
    """A job of tenant acme, stored and announced by the gateway; it waits PENDING."""
    status, body, _ = call(event("POST", "/api/v1/jobs", {"prompt": "hi", "topic": TOPIC},
                                 key=CAROL))
    assert status == 200, body
    s.job_ids.append(body["job_id"])
    return str(body["job_id"])


def stored(s: Scheduler, job_id: str) -> tuple[dict[str, str], bytes | None, bytes | None]:
    """The job's meta, stored request and DLQ entry."""
    return (meta_of(job_id), runtime.run(s.redis.get(f"job:req:{job_id}")),
            runtime.run(s.redis.get(f"dlq:entry:{job_id}")))


def sqs_event(packet: bytes) -> dict[str, object]:
    return {"Records": [{"messageId": "m-1", "receiptHandle": "rh-1",
                         "body": base64.b64encode(packet).decode()}]}


def forged(s: Scheduler, job_id: str, tenant: str, topic: str) -> bytes:
    req = protocol.JobRequest(job_id=job_id, topic=topic, tenant_id=tenant,
                              env={"tenant_id": tenant})
    return s.request_packet(req)


@pytest.mark.parametrize(("tenant", "topic"), [("default", TOPIC),
                                               ("acme", "job.sec-other-topic")],
                         ids=["other-tenant", "other-topic"])
def test_a_request_reusing_a_stored_job_id_leaves_the_job_untouched(stack, tenant, topic):
    s = stack
    # Given tenant acme's job, stored by the gateway
    job_id = carols_job(s)
    before = stored(s, job_id)
    assert (before[0]["tenant"], before[0]["topic"]) == ("acme", TOPIC)

    # When a packet with its id but another tenant (or topic) comes from the bus
    packet = forged(s, job_id, tenant, topic)
    answer = process_batch(sqs_event(packet), s.engine.handle_request, VisibilityDelayer(None))

    # Then the record is reported failed (SQS keeps it; the redrive moves it to the
    # DLQ) and the job, its request and its (absent) DLQ entry are as they were
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert stored(s, job_id) == before
    with pytest.raises(UnparseableRecord):
        runtime.run(s.engine.handle_request(packet))
    assert stored(s, job_id) == before

    # And the gateway's own packet for the job is still dispatched
    req = json_format.Parse(before[1] or b"", protocol.JobRequest())
    own = protocol.packet(trace_id=before[0]["trace_id"], sender_id=protocol.SENDER_GATEWAY,
                          job_request=req).SerializeToString()
    outcome = runtime.run(s.engine.handle_request(own))
    assert outcome.action == "dispatched", outcome
    assert (meta_of(job_id)["tenant"], meta_of(job_id)["topic"]) == ("acme", TOPIC)
