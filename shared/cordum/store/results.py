"""Where a job's result lives: the only keys a result pointer may name.

A worker writes its output at ``res:<job id>`` and reports
``redis://res:<job id>``; the platform alone writes the redacted copy
``res:<job id>:redacted`` (the output policy's REDACT). No other key is ever a
result: the API serves what a job's pointer names, so a pointer elsewhere
(another job's context, a meta hash) would serve that key as this job's output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum import protocol
from cordum.store.json_docs import json_object

if TYPE_CHECKING:
    from collections.abc import Mapping

REDACTED_SUFFIX = ":redacted"
DECISION_TTL_S = 7 * 24 * 3600
"""How long a job's output decision is kept (as long as its meta)."""


def decision_key(job_id: str) -> str:
    """``job:<id>:output_decision``: the output policy's decision (Cordum's key)."""
    return f"job:{job_id}:output_decision"


def result_pointer(job_id: str) -> str:
    """``redis://res:<job id>``: the one pointer a worker may report."""
    return protocol.pointer(protocol.result_key(job_id))


def redacted_key(job_id: str) -> str:
    """``res:<job id>:redacted``: the redacted copy the output policy stores."""
    return protocol.result_key(job_id) + REDACTED_SUFFIX


def redacted_pointer(job_id: str) -> str:
    return protocol.pointer(redacted_key(job_id))


def is_worker_pointer(job_id: str, ptr: str) -> bool:
    """A pointer a worker's result may carry for ``job_id``."""
    return ptr == result_pointer(job_id)


def is_result_pointer(job_id: str, ptr: str) -> bool:
    """A pointer a job's meta may hold: the worker's result or the platform's copy."""
    return ptr in (result_pointer(job_id), redacted_pointer(job_id))


OUTPUT_FINAL_PHASE = "async"
"""The phase of the output decision record that ends the checks (the content scan)."""
_WITHHELD = frozenset({"QUARANTINE", "DENY"})


def output_pending(meta: Mapping[str, str], *, output_policy: bool) -> bool:
    """A SUCCEEDED job whose output decision is not final yet: the output policy is on
    and the content scan has not recorded its decision. Its output must wait. A job
    with no result (an approval gate's) has nothing to wait for."""
    if meta.get("state") != "SUCCEEDED" or not meta.get("result_ptr"):
        return False
    record = json_object(meta.get("output_safety"))
    if record is None:
        return output_policy
    return record.get("phase") != OUTPUT_FINAL_PHASE


def served_result_ptr(job_id: str, meta: Mapping[str, str], *,
                      output_policy: bool) -> str | None:
    """The pointer whose content may be shown as the job's result, else None: the one
    rule of the API and the workflow engine.

    Only a SUCCEEDED job's, once its output decision is final: the output policy
    is off (``output_policy`` False and no decision recorded), or the content scan
    recorded its decision (``output_safety``, written with the state). Between
    SUCCEEDED and that record the content is unscanned. The pointer must be the
    job's own result (or, after a REDACT, must be the redacted copy).
    """
    ptr = meta.get("result_ptr") or ""
    if meta.get("state") != "SUCCEEDED" or not is_result_pointer(job_id, ptr):
        return None
    record = json_object(meta.get("output_safety"))
    if record is None:
        return None if output_policy else ptr
    decision = str(record.get("decision", "")).upper()
    if (record.get("phase") != OUTPUT_FINAL_PHASE or record.get("quarantined") is not False
            or decision in _WITHHELD):
        return None
    if decision == "REDACT" and ptr != redacted_pointer(job_id):
        return None
    return ptr
