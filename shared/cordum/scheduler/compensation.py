"""A compensation: the undo job of a workflow step, as it is stored on the saga
stack, and whose tenant it may run as."""

from __future__ import annotations

import hashlib
from typing import Any

from cordum import protocol

COMPENSATION_LABEL = "saga_compensation"
IS_COMPENSATION_LABEL = "is_compensation"
WORKFLOW_LABEL = "saga_workflow_id"


class InvalidCompensation(ValueError):
    """The request's compensation cannot become a job (no topic, or it names another
    tenant); retrying will not help."""

    retryable = False


def workflow_id_of(req: protocol.JobRequest) -> str:
    """The request's workflow: its own ``workflow_id`` field only.

    Cordum also reads ``labels["workflow_id"]``; a label is whatever the client
    wrote, and must not make a job a step of a saga."""
    return req.workflow_id.strip()


def is_compensation_job(req: protocol.JobRequest) -> bool:
    """A compensation job never records a compensation of its own."""
    for values in (req.labels, req.env):
        flag = values.get(COMPENSATION_LABEL, "").strip()
        if flag and flag != "false":
            return True
    return False


def compensation_idempotency_key(base: protocol.JobRequest) -> str:
    """``"saga:" + hex(sha256(seed)[:16])``, seed = workflow|job|topic|capability|step
    with empty ends trimmed; deterministic, so a re-recorded step gets the same key."""
    comp = base.compensation
    capability = comp.meta.capability.strip() or base.meta.capability.strip()
    step = str(base.step_index) if base.step_index != 0 else ""
    seed = "|".join([base.workflow_id.strip(), base.job_id.strip(), comp.topic.strip(),
                     capability, step]).strip("|")
    if not seed:
        return ""
    return "saga:" + hashlib.sha256(seed.encode()).digest()[:16].hex()


def _merge_meta(out: Any, override: Any) -> None:
    # Field-wise: a non-empty override wins, lists are replaced, labels merged.
    for name in ("tenant_id", "actor_id", "idempotency_key", "capability", "pack_id"):
        value = getattr(override, name)
        if value:
            setattr(out, name, value)
    if override.actor_type:
        out.actor_type = override.actor_type
    for name in ("risk_tags", "requires"):
        values = getattr(override, name)
        if values:
            target = getattr(out, name)
            del target[:]
            target.extend(values)
    out.labels.update(override.labels)


def compensation_template(base: protocol.JobRequest) -> protocol.JobRequest | None:
    """The undo job of ``base`` as stored on the stack; None when it has none.

    A clone of the step with its compensation's non-empty fields laid over it;
    it gets its own job id only when dispatched. Raises
    :class:`InvalidCompensation` when the compensation names no topic.
    """
    if not base.HasField("compensation"):
        return None
    comp = base.compensation
    topic = comp.topic.strip()
    if not topic:
        raise InvalidCompensation("compensation topic required")
    req = protocol.JobRequest()
    req.CopyFrom(base)
    req.ClearField("compensation")
    req.job_id = ""
    req.parent_job_id = base.job_id
    req.workflow_id = base.workflow_id
    req.topic = topic
    for name in ("context_ptr", "adapter_id", "memory_id", "tenant_id", "principal_id"):
        value = getattr(comp, name)
        if value:
            setattr(req, name, value)
    for name in ("context_hints", "budget"):
        if comp.HasField(name):
            getattr(req, name).CopyFrom(getattr(comp, name))
    if comp.HasField("meta"):
        _merge_meta(req.meta, comp.meta)
    req.env.update(comp.env)
    req.labels.update(comp.labels)
    if not comp.meta.idempotency_key.strip():
        key = compensation_idempotency_key(base)
        if key:
            req.meta.idempotency_key = key
    # Whatever priority the step or its compensation asked for, an undo step
    # jumps the queue: it repairs state that other work may depend on.
    req.priority = protocol.JobPriority.JOB_PRIORITY_CRITICAL
    return req


def tenant_claims(req: protocol.JobRequest) -> set[str]:
    """Every tenant the request names (the engine, the kernel and workers each
    read one of these)."""
    return {req.tenant_id, req.env.get("tenant_id", ""), req.meta.tenant_id} - {""}


def belongs_to(req: protocol.JobRequest, tenant: str) -> bool:
    """True when the template is a job of ``tenant`` and names no other tenant."""
    return req.tenant_id == tenant and tenant_claims(req) == {tenant}


def mark_compensation(req: protocol.JobRequest, workflow_id: str) -> None:
    """Label a template about to be dispatched as the compensation job it is."""
    for values in (req.labels, req.env):
        values[COMPENSATION_LABEL] = "true"
        values[IS_COMPENSATION_LABEL] = "true"
        values[WORKFLOW_LABEL] = workflow_id

