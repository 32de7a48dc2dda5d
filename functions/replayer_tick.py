"""Lambda: pending replayer tick (EventBridge rate(1 minute)).

Re-drives PENDING, approved APPROVAL_REQUIRED and SCHEDULED jobs older than
the dispatch timeout through the engine, then checks held outputs again (with the
output policy on), ticking twice a minute under the replayer's TTL-hold lock
(wired in :mod:`cordum.scheduler.replayer_tick`).
"""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.scheduler.replayer_tick import replayer_tick

# The engine builds each of its paths on first use. A tick dispatches only when it
# finds a job to re-drive, which most ticks do not: the dispatch path (routing, the
# registry, the kernel's client) is loaded by the first tick that needs it.
setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return replayer_tick(context)
