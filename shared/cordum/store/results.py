"""Where a job's result lives: the only keys a result pointer may name.

A worker writes its output at ``res:<job id>`` and reports
``redis://res:<job id>``; the platform alone writes the redacted copy
``res:<job id>:redacted`` (the output policy's REDACT). No other key is ever a
result: the API serves what a job's pointer names, so a pointer elsewhere
(another job's context, a meta hash) would serve that key as this job's output.
"""

from __future__ import annotations

from cordum import protocol

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
