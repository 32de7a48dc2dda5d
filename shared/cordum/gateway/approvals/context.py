"""The context of an approval: what an approver needs to decide about one job.

``GET /api/v1/approvals/{job_id}/context`` answers for any job of the caller's
tenant (a missing job and another tenant's answer the same 404 ``job not found``).
The document has Cordum's sections, which its approvers and cordum-sdk read
(``approval``, ``policy_snapshot_summary``, ``blast_radius``, ``prior_approvals``,
``rollback_hint``, ``time_remaining_ms``, ``constraints``, ``decision_summary``),
and our own, named plainly (``what_will_run``, ``why_gated``, ``risk``,
``rollback``, ``time_left``). A workflow approval gate's job keeps its stored
context document (``kind``, ``version``, ``workflow``, ``decision``) at the top.

What it reads of Redis, in two pipelined round trips whatever the tenant stores, and
the prior approvals found there: :mod:`cordum.gateway.approvals.context_reads`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.approval import APPROVAL_GATE_TOPICS, APPROVED, REJECTED, STATUS_FIELD, is_gated
from cordum.gateway.approvals.context_reads import INPUT_PREVIEW_BYTES, micros
from cordum.gateway.core.times import rfc3339_us
from cordum.step_job_ids import parse_step_job_id
from cordum.store.jobs import (
    JobState,
    decode_labels,
)
from cordum.store.json_docs import json_object, json_value
from cordum.store.memory_reads import withheld

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.gateway.approvals.context_reads import StoredContext

GATE_CONTEXT_KIND = "workflow_approval_context"
"""The ``kind`` of the document a workflow approval gate's ``ctx:`` payload holds."""

LABELS_SHOWN = 64
"""Labels shown in ``what_will_run`` at most (by key order)."""
LABEL_VALUE_CHARS = 256
"""A shown label value is cut to this many characters."""
BLAST_ITEMS = 50
"""Systems, namespaces and resources listed at most, each."""


def gate_document(topic: str, payload: bytes | None) -> dict[str, Any] | None:
    """A workflow gate's context document, when ``payload`` is one."""
    if topic not in APPROVAL_GATE_TOPICS or not payload:
        return None
    doc = json_object(payload.decode(errors="replace"))
    return doc if doc is not None and doc.get("kind") == GATE_CONTEXT_KIND else None


# ------------------------------------------------------------------ the document


def approval_status(meta: Mapping[str, str], now: int) -> str | None:
    """approved, rejected, pending (waiting, its deadline not passed), expired (it left
    APPROVAL_REQUIRED undecided, or its deadline passed); None when it never waited."""
    status = meta.get(STATUS_FIELD, "")
    if status == APPROVED:
        return "approved"
    if status == REJECTED:
        return "rejected"
    deadline = micros(meta.get("deadline_unix"))
    if meta.get("state") == JobState.APPROVAL_REQUIRED:
        return "expired" if deadline is not None and deadline <= now else "pending"
    return "expired" if is_gated(meta) else None


def input_withheld(meta: Mapping[str, str], output_decision: Any) -> str | None:
    """Why the job's input must not be shown, else None.

    The rule of the job detail (``store.results.served_result_ptr``) extended to the
    input: nothing raw is shown of a job whose output was quarantined or redacted by
    the output policy, nor of one whose policy verdict asks for redaction (the memory
    route's rule too: ``cordum.store.memory_reads.withheld``).
    """
    return withheld(meta, output_decision)


@dataclass(frozen=True, slots=True)
class InputPreview:
    """The job's input as an approver sees it."""

    text: str | None
    truncated: bool
    size: int
    withheld: str | None

    @classmethod
    def of(cls, size: int, head: bytes, withheld: str | None) -> InputPreview:
        if withheld is not None or not head:
            return cls(None, False, size, withheld)
        truncated = size > INPUT_PREVIEW_BYTES
        shown = head[:INPUT_PREVIEW_BYTES] if truncated else head
        # A cut may split a character: the partial one is dropped.
        return cls(shown.decode(errors="ignore" if truncated else "replace"), truncated,
                   size, None)

    def value(self) -> Any:
        """The input as JSON when it is whole and parses, else the preview text."""
        if self.text is None or self.truncated:
            return self.text
        parsed = json_value(self.text)
        return self.text if parsed is None else parsed

    def fields(self) -> dict[str, Any]:
        return {"input_preview": self.text, "input_truncated": self.truncated,
                "input_size_bytes": self.size, "input_withheld": self.withheld is not None,
                "input_withheld_reason": self.withheld}


def step_of(job_id: str, meta: Mapping[str, str]) -> dict[str, str]:
    """``{workflow_id, run_id, step_id}`` of a workflow's step job (its id
    ``<run>:<step>@<attempt>`` agreeing with its labels), else {}."""
    labels = decode_labels(meta)
    run_id, step_id = labels.get("run_id", ""), labels.get("step_id", "")
    named = parse_step_job_id(job_id)
    if named is None or not run_id or (named.run_id, named.path) != (run_id, step_id):
        return {}
    return {"workflow_id": labels.get("workflow_id", ""), "run_id": run_id,
            "step_id": step_id}


def _priority(raw: str | None) -> int:
    names = {"interactive": 1, "batch": 2, "critical": 3}
    if not raw:
        return 1
    try:
        return int(raw)
    except ValueError:
        return names.get(raw.strip().lower(), 1)


def shown_labels(labels: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """At most :data:`LABELS_SHOWN` labels, values cut to :data:`LABEL_VALUE_CHARS`; and
    whether anything was left out or cut."""
    keys = sorted(labels)
    shown = {k: str(labels[k])[:LABEL_VALUE_CHARS] for k in keys[:LABELS_SHOWN]}
    cut = len(keys) > LABELS_SHOWN or any(len(str(labels[k])) > LABEL_VALUE_CHARS
                                         for k in keys[:LABELS_SHOWN])
    return shown, cut


def blast_radius(labels: Mapping[str, str], tenant: str, topic: str) -> dict[str, Any]:
    """Systems, namespaces and resources the job names in its labels: keys
    ``system:<name>`` (``namespace:``, ``resource:``) and the values of
    ``target_system`` (``target_namespace``, ``target_resource``)."""
    found: dict[str, set[str]] = {"system": set(), "namespace": set(), "resource": set()}
    for key, value in labels.items():
        kind, colon, name = key.partition(":")
        if colon and kind in found and name.strip():
            found[kind].add(name.strip())
        for part in found:
            if key == f"target_{part}" and str(value).strip():
                found[part].add(str(value).strip())
    lists = {part: sorted(names)[:BLAST_ITEMS] for part, names in found.items()}
    counts = [f"{len(names)} {part}(s)" for part, names in found.items() if names]
    scope = (f"Affects {', '.join(counts)} in tenant {tenant}" if counts
             else f"Topic: {topic}")
    return {"systems": lists["system"], "namespaces": lists["namespace"],
            "resources": lists["resource"], "scope_description": scope}


def constraints_summary(constraints: Mapping[str, Any] | None) -> str:
    """The verdict's constraints in a line, e.g. ``max_retries=3, timeout=1000ms,
    sandboxed`` ('' when none). Reads the stored protojson (camelCase) and snake_case."""
    if not constraints:
        return ""

    def get(doc: Any, camel: str, snake: str) -> Any:
        return doc.get(camel, doc.get(snake)) if isinstance(doc, dict) else None

    def number(value: Any) -> int:
        try:
            return int(value or 0)
        except (TypeError, ValueError):
            return 0

    parts: list[str] = []
    budgets = constraints.get("budgets")
    for camel, snake, fmt in (("maxRetries", "max_retries", "max_retries={}"),
                              ("maxRuntimeMs", "max_runtime_ms", "timeout={}ms"),
                              ("maxArtifactBytes", "max_artifact_bytes",
                               "max_artifact_bytes={}"),
                              ("maxConcurrentJobs", "max_concurrent_jobs",
                               "max_concurrent_jobs={}")):
        if (value := number(get(budgets, camel, snake))) > 0:
            parts.append(fmt.format(value))
    sandbox = constraints.get("sandbox")
    if get(sandbox, "isolated", "isolated") is True:
        parts.append("sandboxed")
    if hosts := get(sandbox, "networkAllowlist", "network_allowlist"):
        parts.append(f"network_allowlist={len(hosts)}")
    toolchain = constraints.get("toolchain")
    if tools := get(toolchain, "allowedTools", "allowed_tools"):
        parts.append(f"allowed_tools={len(tools)}")
    diff = constraints.get("diff")
    for camel, snake in (("maxFiles", "max_files"), ("maxLines", "max_lines")):
        if (value := number(get(diff, camel, snake))) > 0:
            parts.append(f"{snake}={value}")
    if level := get(constraints, "redactionLevel", "redaction_level"):
        parts.append(f"redaction={level}")
    return ", ".join(parts)


def _text_list(values: Sequence[Any]) -> list[str]:
    return [str(v) for v in values]


def _risk(meta: Mapping[str, str], req: protocol.JobRequest | None) -> dict[str, Any]:
    """Risk tags, requirements and capability of the stored request, else of the meta."""
    if req is not None and (req.meta.risk_tags or req.meta.requires or req.meta.capability):
        return {"risk_tags": list(req.meta.risk_tags), "requires": list(req.meta.requires),
                "capability": req.meta.capability}

    def listed(name: str) -> list[str]:
        value = json_value(meta.get(name))
        return _text_list(value) if isinstance(value, list) else []

    return {"risk_tags": listed("risk_tags"), "requires": listed("requires"),
            "capability": meta.get("capability", "")}


def _compensation(req: protocol.JobRequest | None) -> dict[str, Any] | None:
    """The saga compensation a workflow step's job carries (recorded on the run's saga
    when the step succeeds, run in reverse on a rollback); None when it has none."""
    if req is None or not req.HasField("compensation") or not req.compensation.topic:
        return None
    return {"topic": req.compensation.topic,
            "context_ptr": req.compensation.context_ptr or None}


def _decision_summary(topic: str, meta: Mapping[str, str], gate: Mapping[str, Any] | None,
                      step: Mapping[str, str]) -> dict[str, str]:
    reason = meta.get("safety_reason", "")
    if gate is not None:
        named = gate.get("workflow")
        wf: Mapping[str, Any] = named if isinstance(named, dict) else {}
        name = str(wf.get("workflow_name") or wf.get("workflow_id")
                   or step.get("workflow_id") or "workflow")
        step_id = str(wf.get("step_id") or step.get("step_id") or "")
        title = f"Workflow approval: {name}" + (f", step {step_id}" if step_id else "")
        return {"source": "workflow_payload", "title": title, "subject": f"Review {topic}",
                "why": reason or "The workflow waits for a person at this step."}
    rule = meta.get("safety_rule_id", "")
    title = f"Approval required by rule {rule}" if rule else "Approval required by policy"
    return {"source": "policy_only", "title": title, "subject": f"Review {topic}",
            "why": reason or "The policy requires a person to approve this job."}


def context_document(job_id: str, stored: StoredContext, *, req: protocol.JobRequest | None,
                     gate: dict[str, Any] | None, preview: InputPreview,
                     priors: list[dict[str, Any]], now: int) -> dict[str, Any]:
    """The answer (``ApprovalContext``), from what was read; ``now`` in µs."""
    meta = stored.meta
    topic, tenant = meta.get("topic", ""), meta.get("tenant", "")
    labels = decode_labels(meta)
    constraints = json_object(meta.get("safety_constraints"))
    step = step_of(job_id, meta)
    deadline = micros(meta.get("deadline_unix"))
    remaining = max(0, deadline - now) // 1000 if deadline is not None else None
    status = approval_status(meta, now)
    decided = status in ("approved", "rejected")
    hint = labels.get("rollback_hint") or None
    snapshot = meta.get("safety_snapshot", "")
    capability = meta.get("capability", "") or (req.meta.capability if req else "")

    approval: dict[str, Any] = {
        "job_id": job_id,
        "state": meta.get("state", ""),
        "decision": meta.get("safety_decision", ""),
        "policy_snapshot": snapshot or None,
        "policy_rule_id": meta.get("safety_rule_id") or None,
        "policy_reason": meta.get("safety_reason") or None,
        "constraints": constraints,
        "approval_required": is_gated(meta) or decided,
        "approval_ref": job_id,
        "approval_status": status,
        "job_input": preview.value(),
    }
    if decided:
        approval["resolved_by"] = meta.get("approved_by", "")
        approval["resolved_comment"] = meta.get("approval_note", "")
        approval["resolution"] = meta.get("approval_reason", "")
        if (at := micros(meta.get("approval_decided_at"))) is not None:
            approval["resolved_at"] = at
    if step and topic in APPROVAL_GATE_TOPICS:
        approval.update(workflow_id=step["workflow_id"], workflow_run_id=step["run_id"],
                        workflow_step_id=step["step_id"])

    shown, labels_cut = shown_labels(labels)
    doc: dict[str, Any] = dict(gate or {})
    if preview.withheld is not None:
        doc.pop("decision", None)  # the gate's evaluated input: withheld as the input is
    doc.update({
        "approval": approval,
        "policy_snapshot_summary": {
            "matched_rule": {"id": meta.get("safety_rule_id", ""),
                             "description": meta.get("safety_reason", ""),
                             "decision": meta.get("safety_decision", ""),
                             "constraints_summary": constraints_summary(constraints)},
            "policy_version": snapshot,
        },
        "blast_radius": blast_radius(labels, tenant, topic),
        "prior_approvals": priors,
        "rollback_hint": hint,
        "time_remaining_ms": remaining,
        "constraints": constraints,
        "decision_summary": _decision_summary(topic, meta, gate, step),
        "what_will_run": {
            "topic": topic, "capability": capability,
            "principal": meta.get("principal", ""),
            "priority": _priority(meta.get("priority")),
            "labels": shown, "labels_truncated": labels_cut,
            **preview.fields(), **step,
        },
        "why_gated": {"rule_id": meta.get("safety_rule_id") or None,
                      "reason": meta.get("safety_reason") or None,
                      "snapshot": snapshot or None,
                      "decision": meta.get("safety_decision") or None,
                      "constraints": constraints},
        "risk": _risk(meta, req),
        "rollback": {"hint": hint, "compensation": _compensation(req)},
        "time_left": {"expires_at": rfc3339_us(deadline), "remaining_ms": remaining},
    })
    return doc
