"""Lambda: job results and cancels from the result queue -> state and result pointer."""

from cordum.lambdas.sqs_batch import VisibilityDelayer, queue_url
from cordum.logs import setup
from cordum.scheduler.batch import process_batch
from cordum.scheduler.service import default_engine

setup()
_delayer = VisibilityDelayer(queue_url("RESULT_QUEUE_URL"))


def handler(event, context):
    return process_batch(event, default_engine().handle_result, _delayer, context)
