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
    return fields
