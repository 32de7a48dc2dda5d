"""Lambda: workflow run events and timers from the workflow queues -> advance the runs."""

from __future__ import annotations

from typing import Any

from cordum.logs import setup
from cordum.workflow.service import handle_batch

setup()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle_batch(event, context)
