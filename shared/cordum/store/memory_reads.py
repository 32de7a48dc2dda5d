"""What a job's ``redis://ctx:<id>`` and ``redis://res:<id>`` pointers hold, read for a
caller that may see them.

Only a job's own context and result are read here, never a key named by the caller
beyond those two shapes: the memory read is no generic Redis reader. A job's data is
shown only under the rule the job detail and the approval context follow
(:func:`cordum.store.results.served_result_ptr`, and the same rule for the input):

- a result is served only as ``served_result_ptr`` allows: a SUCCEEDED job whose
  output decision is final, and after a REDACT only the redacted copy; a raw result
  is also kept back when the decision record or the verdict asks for withholding;
- nothing raw is served, context or result, of a job whose output was quarantined,
  denied or redacted by the output policy, nor of one whose policy verdict asks for
  redaction.

A read is two Redis round trips: the job's meta with its output decision, then the
data (only once the caller may have it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.protocol import CONTEXT_PREFIX, RESULT_PREFIX, context_key, key_from_pointer
from cordum.store.errors import StoreError
from cordum.store.jobs import JobState, meta_key
from cordum.store.json_docs import json_object
from cordum.store.reads import text
from cordum.store.results import REDACTED_SUFFIX, decision_key, output_pending, served_result_ptr

if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_JOB_ID_CHARS = 128
_WITHHELD = frozenset({"QUARANTINE", "DENY"})

KIND_CONTEXT = "context"
KIND_RESULT = "result"


@dataclass(frozen=True, slots=True)
class JobPointer:
    """A job's context or result key, as asked for."""

    kind: str
    job_id: str
    key: str


def job_pointer(key: str) -> JobPointer | None:
    """The job key ``key`` names (``ctx:<id>``, ``res:<id>``, ``res:<id>:redacted``),
    else None. A job id holds no ``:`` and at most :data:`MAX_JOB_ID_CHARS` characters."""
    if key.startswith(CONTEXT_PREFIX):
        kind, job_id = KIND_CONTEXT, key[len(CONTEXT_PREFIX):]
    elif key.startswith(RESULT_PREFIX):
        kind, job_id = KIND_RESULT, key[len(RESULT_PREFIX):].removesuffix(REDACTED_SUFFIX)
    else:
        return None
    if not job_id or ":" in job_id or len(job_id) > MAX_JOB_ID_CHARS:
        return None
    return JobPointer(kind, job_id, key)


def withheld(meta: Mapping[str, str], output_decision: Any) -> str | None:
    """Why nothing raw of the job may be shown, else None."""
    if meta.get("state") == JobState.OUTPUT_QUARANTINED:
        return "the job's output was quarantined"
    for record in (json_object(meta.get("output_safety")), json_object(output_decision)):
        if record is None:
            continue
        decision = str(record.get("decision", "")).upper()
        if record.get("quarantined") is True or decision in _WITHHELD:
            return "the job's output was quarantined by policy"
        if decision == "REDACT":
            return "the job's output was redacted by policy"
    constraints = json_object(meta.get("safety_constraints")) or {}
    level = constraints.get("redactionLevel") or constraints.get("redaction_level")
    if level:
        return f"the policy asks for redaction ({level})"
    return None


@dataclass(frozen=True, slots=True)
class JobRead:
    """The outcome of a read: ``data`` when served; else ``missing`` (no such job, or
    another tenant's: the same answer) or ``withheld`` (why it is not shown)."""

    key: str = ""
    """The key served (a REDACT serves the redacted copy)."""
    data: bytes | None = None
    missing: bool = False
    withheld: str | None = None
    redacted: bool = False


class MemoryReads:
    def __init__(self, redis: Any) -> None:
        self._redis = redis

    async def _meta(self, job_id: str) -> tuple[dict[str, str], Any]:
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(meta_key(job_id))
            pipe.get(decision_key(job_id))
            raw, decision = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"read job {job_id}: {exc}") from exc
        return {text(k): text(v) for k, v in (raw or {}).items()}, decision

    async def _value(self, key: str) -> bytes | None:
        try:
            value = await self._redis.get(key)
        except Exception as exc:
            raise StoreError(f"read {key}: {exc}") from exc
        return None if value is None else bytes(value)

    async def read(self, ptr: JobPointer, tenant: str, *, output_policy: bool) -> JobRead:
        """The data ``ptr`` names when the job is ``tenant``'s and its data may be shown."""
        meta, decision = await self._meta(ptr.job_id)
        if not meta or meta.get("tenant") != tenant:
            return JobRead(missing=True)
        if ptr.kind == KIND_CONTEXT:
            if ptr.key != context_key(ptr.job_id):
                return JobRead(missing=True)
            reason = withheld(meta, decision)
            if reason is not None:
                return JobRead(withheld=reason)
            data = await self._value(ptr.key)
            return JobRead(key=ptr.key, data=data, missing=data is None)
        served = served_result_ptr(ptr.job_id, meta, output_policy=output_policy)
        if served is None:
            reason = withheld(meta, decision)
            if reason is None and output_pending(meta, output_policy=output_policy):
                reason = "the job's output has not been checked yet"
            return JobRead(withheld=reason) if reason else JobRead(missing=True)
        key = key_from_pointer(served)
        redacted = key.endswith(REDACTED_SUFFIX)
        reason = None if redacted else withheld(meta, decision)
        if reason is not None:
            # Stricter than the job detail: a withholding decision recorded anywhere
            # (the decision record, the verdict's constraints) keeps the raw result back.
            return JobRead(withheld=reason)
        data = await self._value(key)
        return JobRead(key=key, data=data, missing=data is None, redacted=redacted)
