"""A step job's end as the engine may see it: what ``GET /api/v1/jobs/{id}`` would serve.

The engine never reads a job's output past the output policy. A SUCCEEDED job's
output reaches the run (its context, its document, the steps after it) only once its
output decision is final, and then only as the API serves it
(:func:`cordum.store.results.served_result_ptr`): the redacted copy after a REDACT,
nothing after a quarantine. Until the decision is final the job counts as still
running; a SUCCEEDED job whose final decision withholds its output (a quarantine
whose state write failed) ends its step as a quarantine does.

The stores read the jobs, this module only interprets them: the event path reads
one job in the run's own read (``lua/read_run.lua``), the reconciler the jobs of a
run's open steps with :meth:`cordum.store.reads.JobReads.step_job_ends`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.store.jobs import TERMINAL_STATES, JobState
from cordum.store.results import output_pending, served_result_ptr
from cordum.text import as_text
from cordum.workflow.gates import GateRecord

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cordum.store.step_jobs import StepJobRecord, StoredJobEnd

JOB_FIELDS = ("state", "result_status", "result_ptr", "failure_reason", "topic",
              "approval_status", "approved_by", "approval_job_hash", "output_safety")
"""The meta fields of a step job the engine reads (in ``lua/read_run.lua``'s order)."""
FATAL_STATE = "FAILED_FATAL"


@dataclass(frozen=True, slots=True)
class JobEnd:
    """A step job as the engine applies it."""

    state: str
    """The job store's state as the engine reads it: FAILED_FATAL told apart from
    FAILED, RUNNING for a SUCCEEDED job whose output decision is not final, '' for a
    job not stored."""
    output: Any = None
    result_ptr: str = ""
    error: dict[str, Any] | None = None
    gate: GateRecord | None = None


def job_end(job_id: str, meta: dict[str, str], result: bytes | None,
            record: StepJobRecord | None, *, output_policy: bool) -> JobEnd:
    """The end of ``job_id`` from its meta fields, the result its pointer names (None
    when not read) and the engine's record of the job."""
    state = meta.get("state", "")
    if state == JobState.FAILED and meta.get("result_status") == FATAL_STATE:
        state = FATAL_STATE
    gate = GateRecord(meta.get("topic", ""), meta.get("approval_status", ""),
                      meta.get("approved_by", ""), meta.get("approval_job_hash", ""),
                      record.request_hash if record is not None else "")
    if state != JobState.SUCCEEDED:
        error = None
        if state in TERMINAL_STATES or state == FATAL_STATE:
            error = {"message": meta.get("failure_reason", ""),
                     "code": meta.get("result_status") or state, "job_id": job_id}
        return JobEnd(state, error=error, gate=gate)
    if output_pending(meta, output_policy=output_policy):
        return JobEnd(JobState.RUNNING.value, gate=gate)
    served = served_result_ptr(job_id, meta, output_policy=output_policy)
    if served is None and meta.get("result_ptr"):
        # The final decision withholds the output, the state still says SUCCEEDED.
        return JobEnd(JobState.OUTPUT_QUARANTINED.value, gate=gate, error={
            "message": "output withheld by the output policy", "job_id": job_id,
            "code": JobState.OUTPUT_QUARANTINED.value})
    output = _output(result) if served is not None and result is not None else None
    return JobEnd(state, output=output, result_ptr=served or "", gate=gate)


def fields_of(values: Sequence[Any]) -> dict[str, str]:
    """The meta fields of :data:`JOB_FIELDS` from an HMGET reply (missing ones left out)."""
    return {name: as_text(value) for name, value in zip(JOB_FIELDS, values, strict=False)
            if value is not None}


def stored_end(job_id: str, stored: StoredJobEnd, *, output_policy: bool) -> JobEnd:
    """:func:`job_end` of a job as a store read it."""
    return job_end(job_id, stored.meta, stored.result, stored.record,
                   output_policy=output_policy)


def _output(raw: Any) -> Any:
    """A stored job result as the step's output: JSON, else its text."""
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")
