"""Lambda: workflow reconciler tick (EventBridge rate(1 minute)).

Lost results, stuck approvals, due timers and run timeouts, ticking every few
seconds under the workflow reconciler's TTL-hold lock.
"""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.workflow.service import tick

setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return tick(context)
