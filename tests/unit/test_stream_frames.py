"""A tapped bus message as the stream shows it: Cordum's protojson, no bus credentials,
and no result pointer the API would not serve."""

from __future__ import annotations

import json
import re

from cordum import protocol
from cordum.store.results import redacted_pointer, result_pointer
from cordum.stream import events as ev
from cordum.stream.frames import (
    event_type,
    packet_frame,
    read_packet,
    read_run_event,
    settle_result,
)

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def result_packet(job_id: str = "j-1", **fields) -> bytes:
    res = protocol.JobResult(job_id=job_id, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                             worker_id="w-1", result_ptr=result_pointer(job_id),
                             execution_ms=12, **fields)
    msg = protocol.packet(trace_id="t-1", sender_id="w-1", job_result=res)
    msg.auth_token = "bus-secret"
    msg.signature = b"sig"
    return msg.SerializeToString()


def test_a_frame_is_cordums_protojson_without_the_bus_credentials():
    tapped = read_packet(protocol.SUBJECT_RESULT, result_packet())
    assert tapped is not None and tapped.type == ev.JOB_RESULT
    frame = tapped.frame
    assert frame["traceId"] == "t-1" and frame["protocolVersion"] == 1
    assert RFC3339.match(frame["createdAt"])
    assert "payload" not in frame and frame["jobResult"]["jobId"] == "j-1"
    assert frame["jobResult"]["status"] == "JOB_STATUS_SUCCEEDED"
    assert frame["jobResult"]["executionMs"] == "12"  # int64 as a string
    assert "authToken" not in frame and "signature" not in frame
    assert "bus-secret" not in json.dumps(frame)


def test_a_request_names_its_job_topic_tenant_and_run():
    req = protocol.JobRequest(job_id="run-1:step@1", topic="job.echo", tenant_id="acme")
    data = protocol.packet(trace_id="t", sender_id="s", job_request=req).SerializeToString()
    tapped = read_packet(protocol.SUBJECT_SUBMIT, data)
    assert tapped is not None
    assert (tapped.type, tapped.job_id, tapped.topic, tapped.claimed_tenant, tapped.run_id) == (
        ev.JOB_SUBMIT, "run-1:step@1", "job.echo", "acme", "run-1")
    assert tapped.frame["jobRequest"]["tenantId"] == "acme"


def test_the_tenant_of_a_request_falls_back_to_its_meta():
    req = protocol.JobRequest(job_id="j", topic="t")
    req.meta.tenant_id = "acme"
    data = protocol.packet(trace_id="t", sender_id="s", job_request=req).SerializeToString()
    tapped = read_packet(protocol.SUBJECT_SUBMIT, data)
    assert tapped is not None and tapped.claimed_tenant == "acme"


def test_a_payload_that_does_not_fit_its_subject_is_not_streamed():
    assert event_type(protocol.SUBJECT_RESULT, "job_request") is None
    assert event_type("sys.job.unknown", "job_result") is None
    assert event_type(protocol.SUBJECT_DLQ, "job_result") == ev.JOB_DLQ
    assert event_type(protocol.SUBJECT_AUDIT_OUTPUT, "job_progress") == ev.AUDIT_OUTPUT
    assert event_type("sys.audit.export", "alert") == ev.SYSTEM_ALERT
    assert event_type(protocol.SUBJECT_WORKFLOW_EVENT, "alert") == ev.SYSTEM_ALERT


def test_progress_carries_no_pointer():
    progress = protocol.JobProgress(job_id="j", percent=50, result_ptr=result_pointer("j"))
    progress.artifact_ptrs.append("redis://art:1")
    data = protocol.packet(trace_id="t", sender_id="s", job_progress=progress)
    tapped = read_packet(protocol.SUBJECT_PROGRESS, data.SerializeToString())
    assert tapped is not None
    assert tapped.frame["jobProgress"] == {"jobId": "j", "percent": 50}


def frame_of(**fields) -> dict:
    tapped = read_packet(protocol.SUBJECT_RESULT, result_packet(**fields))
    assert tapped is not None
    return tapped.frame


def test_a_withheld_result_has_no_pointer_and_the_platforms_status():
    frame = frame_of(artifact_ptrs=["redis://art:1"])
    settle_result(frame, "OUTPUT_QUARANTINED", None)
    payload = frame["jobResult"]
    assert payload["status"] == "JOB_STATUS_DENIED"
    assert "resultPtr" not in payload and "artifactPtrs" not in payload


def test_a_redacted_result_points_at_the_redacted_copy():
    frame = frame_of()
    frame["jobResult"]["resultRef"] = {"uri": "s3://elsewhere"}
    settle_result(frame, "SUCCEEDED", redacted_pointer("j-1"))
    assert frame["jobResult"]["resultPtr"] == redacted_pointer("j-1")
    assert "resultRef" not in frame["jobResult"]


def test_an_undecided_result_keeps_the_workers_status_and_shows_nothing():
    frame = frame_of()
    settle_result(frame, None, None)
    assert frame["jobResult"]["status"] == "JOB_STATUS_SUCCEEDED"
    assert "resultPtr" not in frame["jobResult"]


def test_a_workflow_run_event_is_forwarded_as_it_is():
    doc = {"type": "workflow.run", "runId": "r-1", "workflowId": "wf", "tenantId": "acme",
           "status": "running", "stepId": "s", "createdAt": "2026-01-01T00:00:00Z"}
    tapped = read_run_event(json.dumps(doc).encode())
    assert tapped is not None
    assert tapped.frame == doc and tapped.claimed_tenant == "acme" and tapped.run_id == "r-1"
    assert read_run_event(b"not json") is None
    assert read_run_event(json.dumps({**doc, "type": "other"}).encode()) is None
    assert read_run_event(json.dumps({**doc, "runId": ""}).encode()) is None


def test_packet_frame_leaves_the_packet_untouched():
    msg = protocol.packet(trace_id="t", sender_id="s",
                          heartbeat=protocol.Heartbeat(worker_id="w"))
    msg.auth_token = "x"
    packet_frame(msg)
    assert msg.auth_token == "x"
