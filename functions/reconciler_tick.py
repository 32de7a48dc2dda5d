"""Lambda: reconciler tick (EventBridge rate(1 minute)).

Hands the jobs of lost workers and lost dispatches to another worker (or fails
them), then times out stale SCHEDULED / DISPATCHED / RUNNING jobs and jobs past
their deadline, ticking twice a minute under the reconciler's TTL-hold lock
(wired in :mod:`cordum.scheduler.ticks`).
"""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.scheduler.ticks import reconciler_tick

setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return reconciler_tick(context)
