"""Lambda: saga rollback of a failed workflow (invoked asynchronously by the result function).

Not implemented in this release: the scheduler work brings saga compensation.
"""

import logging

from cordum.logs import setup

setup()
log = logging.getLogger("cordum.saga")


def handler(event, context):
    log.warning("saga rollback: not implemented in this release; event %s ignored",
                (event or {}).get("workflow_id", "?"))
    return {"status": "not_implemented"}
