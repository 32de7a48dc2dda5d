"""Lambda: reconciler tick (EventBridge rate(1 minute)).

Hands the jobs of lost workers and lost dispatches to another worker (or fails
them), then times out stale SCHEDULED / DISPATCHED / RUNNING jobs and jobs past
their deadline, ticking twice a minute under the reconciler's TTL-hold lock
(wired in :mod:`cordum.scheduler.reconciler_tick`).
"""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.scheduler.reconciler_tick import reconciler_tick

# The engine builds each of its paths on first use. A tick dispatches only when it
# finds a lost worker's or a lost dispatch's job, which most ticks do not: the
# dispatch path (routing, the registry, the kernel's client) is loaded by the first
# tick that needs it.
setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return reconciler_tick(context)
