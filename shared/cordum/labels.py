"""Job labels the platform writes itself, and the text rules of caller-given names.

A label the platform sets (an approval, a fail-open mark, workflow or saga
membership, a DLQ retry mark, bus bookkeeping, anything ``_``-prefixed) is
never taken from a caller: the API refuses it, and no component reads one as
a grant. Case is ignored, so ``Approval_Granted`` is as reserved as
``approval_granted``.
"""

from __future__ import annotations

import re

RESERVED_LABEL_PREFIXES = ("approval_", "safety_", "saga_", "cordum.", "policy.", "_")
"""``approval_*`` (approve endpoint), ``safety_*`` (fail-open bypass), ``saga_*``
(compensations), ``cordum.*`` (bus message id), ``policy.*`` (policy attachment),
``_*`` (``_source`` and other gateway marks)."""

RESERVED_LABELS = frozenset({
    "workflow_id", "run_id", "step_id",  # workflow membership
    "is_compensation",  # saga compensation jobs
    "retry", "dlq_entry", "retry_of_job",  # DLQ retries
    "remediation_of", "remediation_id",  # a job submitted by applying a remediation
})
"""Reserved label names that no prefix covers."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_reserved_label(key: str) -> bool:
    """Whether ``key`` names a label only the platform may set."""
    name = key.strip().lower()
    return name in RESERVED_LABELS or name.startswith(RESERVED_LABEL_PREFIXES)


def has_control_chars(text: str) -> bool:
    """Whether ``text`` holds a C0 control character or DEL (a line break among them)."""
    return _CONTROL.search(text) is not None
