"""Stream events: ids that order like a tenant's log, what a client's filters keep,
the subject token of a tenant, and the encodings between replicas, in the log and to
a client."""

from __future__ import annotations

import json

import pytest

from cordum.stream import events as ev
from cordum.stream.errors import InvalidRequest
from cordum.stream.events import Event, Filters, id_after, parse_id, subject_token
from cordum.stream.settings import DEFAULT_PORT, load_stream_settings
from cordum.stream.transports import raw_frame, sse_text, ws_text


def test_ids_order_like_the_log():
    assert parse_id("17-3") == (17, 3) and parse_id("17") == (17, 0)
    assert id_after("17-10", "17-9") and id_after("18-0", "17-99")
    assert not id_after("17-3", "17-3") and not id_after("", "1-0")
    assert id_after("1-0", "")
    for bad in ("", "x", "1-2-3", "-1", "1-"):
        with pytest.raises(ValueError):
            parse_id(bad)


def test_a_tenant_is_a_subject_token_or_its_hex():
    assert subject_token("acme-1") == "acme-1"
    assert subject_token(None) == "_admin"
    assert subject_token("_admin") == "~" + b"_admin".hex()
    for odd in ("a.b", "a b", "*", ">"):
        token = subject_token(odd)
        assert token.startswith("~") and not set(token) & set(".* >")


def event(**fields) -> Event:
    base = {"type": ev.JOB_RESULT, "data": {}, "tenant": "acme", "job_id": "j",
            "topic": "job.echo"}
    return Event(**{**base, **fields})


def test_each_filter_keeps_only_what_matches_it():
    f = Filters.from_query({"types": "job.submit,job.result", "topic": "job.*",
                            "run_id": "run-1"})
    assert f.matches(event(job_id="run-1:step@1", run_id="run-1"))
    assert not f.matches(event(job_id="other", run_id=""))
    assert not f.matches(event(type=ev.JOB_PROGRESS, run_id="run-1"))
    assert not f.matches(event(run_id="run-1", topic="other.echo"))
    assert not f.matches(event(run_id="run-1", topic=""))
    assert Filters().matches(event(type=ev.WORKER_HEARTBEAT, tenant=None, job_id=""))


def test_the_notices_pass_every_filter():
    f = Filters.from_query({"types": "job.result", "job_id": "x"})
    assert f.matches(event(type=ev.STREAM_TRUNCATED, job_id=""))
    assert f.matches(event(type=ev.JOB_STATE, job_id=""))


def test_a_bad_filter_is_400():
    with pytest.raises(InvalidRequest):
        Filters.from_query({"types": "job.result,job.nope"})
    with pytest.raises(InvalidRequest):
        Filters.from_query({"topic": "x" * (ev.MAX_FILTER_CHARS + 1)})
    with pytest.raises(InvalidRequest):
        Filters.from_query({"job_id": "a"}, job_id="b")
    assert Filters.from_query({}, job_id="b").job_id == "b"


def test_an_event_survives_the_wire_and_the_log():
    original = Event(ev.JOB_RESULT, {"jobResult": {"jobId": "j"}}, "acme", id="5-1",
                     prev="5-0", job_id="j", run_id="", topic="t", final=True)
    assert Event.from_wire(original.to_wire()) == original
    logged = Event.from_log("acme", "5-1", original.log_fields())
    assert logged == Event(ev.JOB_RESULT, {"jobResult": {"jobId": "j"}}, "acme", id="5-1",
                           job_id="j", topic="t", final=True)
    admin = Event(ev.WORKER_HEARTBEAT, {"heartbeat": {}}, None)
    assert Event.from_wire(admin.to_wire()).tenant is None
    with pytest.raises(ValueError):
        Event.from_wire(b"[]")


def test_what_a_client_receives():
    packet = Event(ev.JOB_SUBMIT, {"jobRequest": {"jobId": "j"}}, "acme", id="9-0")
    assert json.loads(ws_text(packet, envelope=False)) == {"jobRequest": {"jobId": "j"}}
    assert json.loads(ws_text(packet, envelope=True)) == {
        "id": "9-0", "type": "job.submit", "data": {"jobRequest": {"jobId": "j"}}}
    assert sse_text(packet, with_id=True) == \
        'id: 9-0\nevent: job.submit\ndata: {"jobRequest":{"jobId":"j"}}\n\n'
    assert sse_text(packet, with_id=False).startswith("event: job.submit\n")
    state = Event(ev.JOB_STATE, {"id": "j", "state": "RUNNING"}, "acme")
    assert raw_frame(state) == {"type": "job.state", "id": "j", "state": "RUNNING"}
    run = Event(ev.WORKFLOW_RUN, {"type": "workflow.run", "runId": "r"}, "acme")
    assert raw_frame(run) == run.data


def test_settings_default_and_name_their_variable():
    settings = load_stream_settings({})
    assert settings.port == DEFAULT_PORT and settings.host == "0.0.0.0"
    assert (settings.max_connections_per_key, settings.log_max_events, settings.log_max_age_s,
            settings.result_settle_s, settings.client_buffer, settings.key_recheck_s) == (
        20, 10_000, 3600, 10.0, 256, 120.0)
    assert load_stream_settings({"STREAM_PORT": "9000", "STREAM_EMF_METRICS": "true"}).port \
        == 9000
    from cordum.config import ConfigError

    with pytest.raises(ConfigError, match="STREAM_CLIENT_BUFFER"):
        load_stream_settings({"STREAM_CLIENT_BUFFER": "0"})
    with pytest.raises(ConfigError, match="STREAM_QUEUE_GROUP"):
        load_stream_settings({"STREAM_QUEUE_GROUP": "a.>"})
