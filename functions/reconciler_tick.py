"""Lambda: reconciler tick (EventBridge rate(1 minute)).

Not implemented in this release: the scheduler work brings the reconciler
(timeouts of SCHEDULED / DISPATCHED / RUNNING jobs and expired deadlines).
"""

import logging

from cordum.logs import setup

setup()
log = logging.getLogger("cordum.reconciler")


def handler(event, context):
    log.warning("reconciler tick: not implemented in this release; nothing was scanned")
    return {"status": "not_implemented"}
