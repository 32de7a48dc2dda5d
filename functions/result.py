"""Lambda: job results and cancels from the result queue -> state and result pointer."""

from cordum.lambdas.sqs_batch import VisibilityDelayer, queue_url
from cordum.logs import setup
from cordum.scheduler import output_check, results, saga  # noqa: F401  (its path: see below)
from cordum.scheduler.batch import process_batch
from cordum.scheduler.service import default_engine

# The engine builds each of its paths on first use; this function's path (imported
# above) is loaded with the module, the others never.
setup()
_delayer = VisibilityDelayer(queue_url("RESULT_QUEUE_URL"))


def handler(event, context):
    return process_batch(event, default_engine().handle_result, _delayer, context)
