"""Outbox entries (cordum.workflow.outbox_entries): typed, built from an event's effects
in one place, stored in the JSON form earlier versions wrote and read."""

from __future__ import annotations

import json
import logging

from cordum.workflow import engine, outbox
from cordum.workflow.definition import StepMeta, parse_workflow
from cordum.workflow.model import TimelineEvent, WorkflowRun
from cordum.workflow.outbox_entries import (
    NEWS_MAX_EVENTS,
    CancelChildRun,
    CancelJob,
    PublishJob,
    QueueTimer,
    SendAlert,
    StartChildRun,
    TellParent,
    UndoJob,
    decode,
    encode,
    run_news,
    to_outbox,
)
from cordum.workflow.steps import StepJob

RUN = "r-1"
JOB = {"job_id": f"{RUN}:work@1", "step_id": "work", "topic": "job.echo",
       "input": {"n": 1}, "env": {"a": "b"}, "labels": {"region": "eu"},
       "priority": "critical", "deadline_ms": 5000, "idempotency_key": "k1",
       "meta": {"capability": "echo", "risk_tags": ["pii"]}, "kind": "job"}
PREVIOUS_VERSION = [
    {"job": JOB},
    {"job": {**JOB, "job_id": f"{RUN}:undo@2", "resend": 3, "meta": None,
             "compensation": {"topic": "job.undo", "input": {"u": 1}}}},
    {"cancel": f"{RUN}:old@1"},
    {"alert": {"message": "hi", "severity": 3, "source_component": "notify",
               "details": {"k": "v"}, "trace_id": RUN}},
    {"timer": 1790000000.5},
    {"run": {"run_id": "c-1", "workflow_id": "w", "input": {}, "metadata": {},
             "dry_run": False}},
    {"cancel_run": "c-2"},
    {"parent": "p-1"},
]
"""One entry of each kind, as the version before typed entries wrote them."""


def test_entries_stored_by_the_previous_version_read_as_their_kinds():
    work, undo, cancel, alert, timer, child, cancel_run, parent = decode(PREVIOUS_VERSION)
    assert work == PublishJob(f"{RUN}:work@1", "job.echo", "work", {"n": 1}, {"a": "b"},
                              {"region": "eu"}, "critical", 5000, "k1",
                              {"capability": "echo", "risk_tags": ["pii"]}, "job")
    assert (undo.resend, undo.meta, undo.compensation) == (3, None,
                                                           UndoJob("job.undo", {"u": 1}))
    assert cancel == CancelJob(f"{RUN}:old@1")
    assert alert == SendAlert("hi", 3, "notify", RUN, {"k": "v"})
    assert timer == QueueTimer(1790000000.5)
    assert child == StartChildRun(PREVIOUS_VERSION[5]["run"])
    assert (cancel_run, parent) == (CancelChildRun("c-2"), TellParent("p-1"))


def test_the_stored_form_is_unchanged_so_either_version_reads_the_others():
    assert encode(decode(PREVIOUS_VERSION)) == PREVIOUS_VERSION
    assert decode(json.loads(json.dumps(encode(decode(PREVIOUS_VERSION))))) == decode(
        PREVIOUS_VERSION)


def test_a_minimal_job_reads_with_defaults():
    [job] = decode([{"job": {"job_id": "r:a@1", "topic": "job.a"}}])
    assert job == PublishJob("r:a@1", "job.a")
    assert (job.kind, job.priority, job.resend, job.compensation) == ("job", "", 0, None)


def test_nothing_stored_and_entries_that_do_not_read_are_left_out(caplog):
    assert decode(None) == [] and decode({"job": {}}) == []
    with caplog.at_level(logging.WARNING):
        got = decode([{"x": 1}, {"job": {"topic": "no id"}}, "text", {"timer": "soon"},
                      {"job": "not an object"}, {"cancel": "j"}])
    assert got == [CancelJob("j")]
    assert len(caplog.records) == 5


def test_effects_become_entries_in_one_place():
    wf = parse_workflow({"id": "w", "name": "w", "steps": {
        "work": {"topic": "job.echo", "compensation": {"topic": "job.undo",
                                                       "input": {"u": 1}}},
        "gate": {"type": "approval", "compensation": {"topic": "job.undo"}}}},
        tenant="t", principal="p", now="2026-01-01T00:00:00Z")
    meta = StepMeta(capability="echo")
    jobs = [StepJob(f"{RUN}:work@1", "work", "job.echo", {"n": 1}, {}, {}, "batch", 0, "",
                    meta=meta),
            StepJob(f"{RUN}:gate@1", "gate", "job.cordum.approval-gate", {}, {}, {},
                    "interactive", 0, "", kind="approval")]
    effects = engine.Effects(jobs=jobs, cancels=["j"], runs=[{"run_id": "c"}],
                             cancel_runs=["c-2"],
                             alerts=[{"message": "m", "severity": 2, "details": {"a": 1}}])
    work, gate, *rest = to_outbox(effects, timer_at=12.0, steps=wf.steps)
    assert isinstance(work, PublishJob) and work.compensation == UndoJob("job.undo", {"u": 1})
    assert work.meta == meta.model_dump(exclude_none=True)
    assert isinstance(gate, PublishJob) and gate.compensation is None  # a gate's is not sent
    assert rest == [CancelJob("j"), SendAlert("m", 2, outbox.SENDER, "", {"a": "1"}),
                    StartChildRun({"run_id": "c"}), CancelChildRun("c-2"), QueueTimer(12.0)]
    assert to_outbox(engine.Effects(), timer_at=None) == []


def test_a_jobs_request_its_context_and_its_undo_context():
    [work, undo] = decode(PREVIOUS_VERSION[:2])
    run = WorkflowRun(id=RUN, workflow_id="w", org_id="t", triggered_by="alice")
    req = outbox.job_request(run, work)
    assert (req.job_id, req.topic, req.priority, req.budget.deadline_ms) == (
        f"{RUN}:work@1", "job.echo", 3, 5000)
    assert (req.workflow_id, req.tenant_id, req.principal_id) == (RUN, "t", "alice")
    assert (req.meta.capability, list(req.meta.risk_tags)) == ("echo", ["pii"])
    assert outbox.contexts_of([work, undo]) == {
        f"{RUN}:work@1": '{"n":1}', f"{RUN}:undo@2": '{"n":1}',
        f"{RUN}:undo@2:undo": '{"u":1}'}
    assert outbox.request_hash(run, work) != outbox.request_hash(run, undo)


def test_the_run_cancel_reason_has_one_definition():
    assert outbox.CANCEL_REASON is engine.CANCEL_REASON == "workflow run cancelled"


def test_run_news_is_bounded_and_reads_back_as_it_was_stored():
    timeline = [TimelineEvent(time="2026-11-26T08:00:00.000000Z", type="step_dispatched",
                              run_id="r", workflow_id="w", step_id=f"s[{i}]")
                for i in range(NEWS_MAX_EVENTS + 7)]
    # Given an event that started more steps than one news item carries
    news = run_news("running", timeline)
    assert news is not None
    # Then it carries the first NEWS_MAX_EVENTS and counts the rest
    assert len(news.events) == NEWS_MAX_EVENTS and news.truncated == 7
    assert news.events[0]["step_id"] == "s[0]" and news.events[0]["timestamp"]
    # And it is stored and read back unchanged with the run's other entries
    (back,) = decode(json.loads(json.dumps(encode([news]))))
    assert back == news
    # And an event with no timeline tells nothing
    assert run_news("running", []) is None
