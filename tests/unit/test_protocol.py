"""CAP packet helpers: what workers accept, what we reject."""

from __future__ import annotations

import pytest

from cordum import protocol


def test_packets_we_build_pass_the_envelope_checks_workers_apply():
    req = protocol.JobRequest(job_id="j1", topic="job.default")
    msg = protocol.packet(trace_id="t1", sender_id="cordum-scheduler", job_request=req)
    decoded = protocol.decode(msg.SerializeToString())
    assert decoded.kind == "job_request"
    assert decoded.packet.protocol_version == 1
    assert decoded.packet.created_at.seconds > 0


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda m: m.ClearField("trace_id"), "trace_id"),
        (lambda m: m.ClearField("sender_id"), "sender_id"),
        (lambda m: m.ClearField("created_at"), "created_at"),
        (lambda m: setattr(m, "protocol_version", 0), "protocol_version"),
        (lambda m: m.ClearField("job_request"), "payload"),
    ],
)
def test_envelope_problems_are_named(mutate, problem):
    msg = protocol.packet(trace_id="t", sender_id="s",
                          job_request=protocol.JobRequest(job_id="j", topic="job.x"))
    mutate(msg)
    with pytest.raises(protocol.InvalidPacket, match=problem):
        protocol.decode(msg.SerializeToString())


def test_bytes_that_are_not_protobuf_are_invalid():
    with pytest.raises(protocol.InvalidPacket):
        protocol.decode(b"\xff\xff\xff\xff")


def test_job_request_validation_lists_every_problem():
    req = protocol.JobRequest(job_id=" ", topic="", priority=7, step_index=-1)
    req.budget.deadline_ms = -5
    with pytest.raises(protocol.InvalidPacket) as info:
        protocol.validate_job_request(req)
    text = str(info.value)
    for fragment in ("job_id", "topic", "priority 7", "step_index", "deadline_ms"):
        assert fragment in text


def test_job_result_validation():
    protocol.validate_job_result(protocol.JobResult(
        job_id="j", status=protocol.JobStatus.JOB_STATUS_SUCCEEDED, worker_id="w"))
    with pytest.raises(protocol.InvalidPacket, match="worker_id"):
        protocol.validate_job_result(protocol.JobResult(
            job_id="j", status=protocol.JobStatus.JOB_STATUS_SUCCEEDED))


def test_pointers_round_trip():
    assert protocol.pointer(protocol.context_key("a")) == "redis://ctx:a"
    assert protocol.key_from_pointer("redis://res:a") == "res:a"
    assert protocol.key_from_pointer("res:a") == "res:a"


def test_cap_package_init_is_never_run():
    import sys

    assert "cap" not in sys.modules or not hasattr(sys.modules["cap"], "submit_job")
