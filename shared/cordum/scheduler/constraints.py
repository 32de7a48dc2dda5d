"""Policy constraints (ALLOW_WITH_CONSTRAINTS) written into the job a worker receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)

if TYPE_CHECKING:
    from cordum.safety.client import SafetyVerdict


def constraints_json(constraints: Any) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(constraints, indent=None)


def parse_constraints(raw: str) -> Any:
    """Stored constraints back as a PolicyConstraints message (None when absent or broken)."""
    if not raw:
        return None
    from google.protobuf import json_format

    from cordum.agent.v1 import safety_pb2

    try:
        return json_format.Parse(raw, safety_pb2.PolicyConstraints(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError):
        return None


def apply_constraints(req: protocol.JobRequest, constraints: Any) -> None:
    """What Cordum's applyConstraints does: env for the worker, and the runtime cap
    as the job's deadline when it is tighter than the one asked for."""
    req.env["CORDUM_POLICY_CONSTRAINTS"] = constraints_json(constraints)
    if constraints.redaction_level:
        req.env["CORDUM_REDACTION_LEVEL"] = constraints.redaction_level
    budgets = constraints.budgets
    if budgets.max_runtime_ms > 0 and (
        req.budget.deadline_ms == 0 or req.budget.deadline_ms > budgets.max_runtime_ms
    ):
        req.budget.deadline_ms = budgets.max_runtime_ms
    for name, value in (
        ("CORDUM_MAX_ARTIFACT_BYTES", budgets.max_artifact_bytes),
        ("CORDUM_MAX_CONCURRENT_JOBS", budgets.max_concurrent_jobs),
        ("CORDUM_MAX_RETRIES", budgets.max_retries),
    ):
        if value > 0:
            req.env[name] = str(value)



def safety_meta(verdict: SafetyVerdict, job_hash: str) -> dict[str, str]:
    """The job meta fields that record a safety decision (the scheduler at dispatch and
    the gateway at submit write the same record, which approvals are bound to)."""
    from cordum.safety.client import Decision
    from cordum.store.jobs import now_us

    fields = {
        "safety_decision": verdict.decision.value,
        "safety_reason": verdict.reason,
        "safety_rule_id": verdict.rule_id,
        "safety_snapshot": verdict.policy_snapshot,
        "safety_job_hash": job_hash,
        "safety_checked_at": str(now_us()),
    }
    if verdict.approval_required or verdict.decision is Decision.REQUIRE_APPROVAL:
        fields["safety_approval_required"] = "true"
        fields["safety_approval_ref"] = verdict.approval_ref
    if verdict.constraints is not None:
        fields["safety_constraints"] = constraints_json(verdict.constraints)
    # Always written, "" when none: a newer decision withdraws an older one's offers.
    fields["safety_remediations"] = remediations_json(verdict.remediations)
    return fields


MAX_REMEDIATIONS = 5
"""Remediations kept with a decision; the kernel's first five, in its order."""
MAX_REMEDIATION_NAME = 256
"""``id``, ``replacement_topic``, ``replacement_capability``, each label key, value and
removed name: a remediation with a longer one is not kept (cut, it would name
something else)."""
MAX_REMEDIATION_TITLE = 256
MAX_REMEDIATION_SUMMARY = 1024
"""``title`` and ``summary`` are prose for a reader: cut to these many characters."""
MAX_REMEDIATION_LABELS = 8
"""``add_labels`` entries, and ``remove_labels`` names: a remediation with more is not
kept. With the limits above a stored record is at most about 41 KB before JSON
escaping (5 x (3 x 256 + 256 + 1024 + 8 x 512 + 8 x 256) characters)."""


def remediation_record(rem: Any) -> dict[str, Any] | None:
    """A ``PolicyRemediation`` as stored with the decision (Cordum's snake_case field
    names), or None when it breaks a limit above."""
    names = (rem.id, rem.replacement_topic, rem.replacement_capability)
    add = dict(rem.add_labels)
    remove = list(rem.remove_labels)
    if len(add) > MAX_REMEDIATION_LABELS or len(remove) > MAX_REMEDIATION_LABELS:
        return None
    if any(len(n) > MAX_REMEDIATION_NAME for n in (*names, *add, *add.values(), *remove)):
        return None
    return {"id": rem.id, "title": rem.title[:MAX_REMEDIATION_TITLE],
            "summary": rem.summary[:MAX_REMEDIATION_SUMMARY],
            "replacement_topic": rem.replacement_topic,
            "replacement_capability": rem.replacement_capability,
            "add_labels": add, "remove_labels": remove}


def remediations_json(remediations: Any) -> str:
    """The ``safety_remediations`` field: a JSON list of at most :data:`MAX_REMEDIATIONS`
    records (those over a limit left out), "" when there is none."""
    import json

    kept = [r for r in map(remediation_record, remediations or ()) if r is not None]
    if not kept:
        return ""
    return json.dumps(kept[:MAX_REMEDIATIONS], separators=(",", ":"), ensure_ascii=False)
