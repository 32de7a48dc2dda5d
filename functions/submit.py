"""Lambda: job requests from the submit queue -> policy, routing, dispatch to a worker."""

from cordum.lambdas.sqs_batch import VisibilityDelayer, queue_url
from cordum.logs import setup
from cordum.registry import reader  # noqa: F401  (its path: see below)
from cordum.scheduler import backoff, dispatch, strategy  # noqa: F401
from cordum.scheduler.batch import process_batch
from cordum.scheduler.service import default_engine

# The engine builds each of its paths on first use; this function's path (imported
# above) is loaded with the module, the others never.
setup()
_delayer = VisibilityDelayer(queue_url("SUBMIT_QUEUE_URL"))


def handler(event, context):
    return process_batch(event, default_engine(results=False).handle_request, _delayer, context)
