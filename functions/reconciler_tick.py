"""Lambda: reconciler tick (EventBridge rate(1 minute)).

Hands the jobs of lost workers and lost dispatches to another worker (or fails
them), then times out stale SCHEDULED / DISPATCHED / RUNNING jobs and jobs past
their deadline, ticking twice a minute under the reconciler's TTL-hold lock
(wired in :mod:`cordum.scheduler.reconciler_tick`).
"""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.scheduler import dispatch  # noqa: F401  (its path: see below)
from cordum.scheduler.reconciler_tick import reconciler_tick

# The engine builds each of its paths on first use; this function's path (imported
# above) is loaded with the module, the others never.
setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return reconciler_tick(context)
