"""Reason codes of DLQ entries and the CAP ErrorCode numbers they map to."""

from __future__ import annotations

ERROR_CODES = {
    "approval_rejected": 300,
    "policy_denied": 300,
    "safety_denied": 300,
    "policy_violation": 301,
    "max_scheduling_retries": 201,
    "timeout": 200,
    "permission_denied": 202,
}
"""Reason codes -> CAP ErrorCode numbers (SAFETY_DENIED, JOB_RESOURCE_EXHAUSTED, ...)."""


def error_code_enum(code: str) -> int:
    return ERROR_CODES.get(code, 0)
