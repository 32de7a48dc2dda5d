"""What a run keeps of a step's input: the input itself, or a pointer when it is large.

A step's rendered input is kept in its state (``StepRun.input``) for the API and for
the engine's own later reads. A worker step's input also lives at ``ctx:<job_id>``
(its job reads it there), and a subworkflow step's in its child run: above
``MAX_INLINE_INPUT`` bytes the run keeps only a pointer to that copy, as it keeps
outputs above 256 KiB only as their ``result_ptr``. Steps whose input nothing else
holds (transform, storage, notify), approval gates (the approver's view) and
policy-gated steps (whose approved input is checked again) keep it whole.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.step_job_ids import step_job_id
from cordum.workflow.status import NO_JOB_KINDS, kind_of

if TYPE_CHECKING:
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

MAX_INLINE_INPUT = 64 * 1024
"""A step input larger than this (as JSON) is kept as a pointer."""
POINTER = "input_ptr"
"""The pointer's key: ``redis://ctx:<job_id>``, or ``run:<child run id>``."""
SIZE = "input_bytes"


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (as the store writes it)."""
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def kept(payload: Any, where: str) -> Any:
    """``payload``, or a pointer to ``where`` it is held whole when it is larger than
    ``MAX_INLINE_INPUT``. An activated error handler's ``error`` stays beside the
    pointer: its retry reads it back."""
    size = json_size(payload)
    if size <= MAX_INLINE_INPUT:
        return payload
    out: dict[str, Any] = {POINTER: where, SIZE: size}
    if isinstance(payload, dict) and "error" in payload:
        out["error"] = payload["error"]
    return out


def kept_input(a: Advance, step: Step, sr: StepRun, payload: Any) -> Any:
    """What ``sr`` keeps of the payload its job is about to be sent with: a worker job's
    large input as a pointer to ``ctx:<job_id>`` (a dry run sends no job: kept whole)."""
    kind = kind_of(step)
    if (kind in NO_JOB_KINDS or kind == "approval" or a.run.dry_run
            or step.policy_gate == "require_approval"):
        return payload
    return kept(payload, protocol.pointer(protocol.context_key(
        step_job_id(a.run.id, sr.step_id, sr.attempts))))


def is_pointer(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get(POINTER), str) and SIZE in value
