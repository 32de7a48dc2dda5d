"""Lambda: pending replayer tick (EventBridge rate(1 minute)).

Not implemented in this release: the scheduler work brings the pending replayer
(re-driving PENDING and SCHEDULED jobs older than the dispatch timeout).
"""

import logging

from cordum.logs import setup

setup()
log = logging.getLogger("cordum.replayer")


def handler(event, context):
    log.warning("replayer tick: not implemented in this release; nothing was scanned")
    return {"status": "not_implemented"}
