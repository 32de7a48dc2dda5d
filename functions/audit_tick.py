"""Lambda: audit tick (EventBridge rate(1 minute)).

Drains the tenants' audit outboxes into their chains, exports each chain's next
entries to the audit bucket (one object per tenant and tick, in seq order) and trims
from Redis what is exported and older than the last CORDUM_AUDIT_KEEP_ENTRIES, unless
a legal hold stands; ticking every 15 s under its TTL-hold lock (wired in
:mod:`cordum.lambdas.audit_tick`).
"""

from __future__ import annotations

from typing import Any

from cordum.lambdas.audit_tick import audit_tick
from cordum.logs import setup

setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return audit_tick(context)
