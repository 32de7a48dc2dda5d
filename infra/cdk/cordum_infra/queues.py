"""SQS queues between the bridge and the submit / result functions.

Each queue has a dead-letter queue: a message received MAX_RECEIVE_COUNT times
without being deleted (a poison message, or one retried past its budget) is
moved there instead of cycling forever.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

MAX_RECEIVE_COUNT = 5
"""Receives before a message is moved to the DLQ."""

VISIBILITY_TIMEOUT_FACTOR = 6
"""Queue visibility timeout = this x the consumer's timeout, as AWS advises for
Lambda event sources: a batch still being retried by the poller must not
reappear to another poller."""

BATCH_SIZE = 10
"""Records per invocation of the submit / result functions."""

MAX_BATCHING_WINDOW = Duration.seconds(0)
"""No waiting to fill a batch: dispatch latency matters more than batch size."""

DLQ_RETENTION = Duration.days(14)
"""The maximum SQS allows: time to inspect and redrive dead letters."""

QUEUE_RETENTION = Duration.days(4)


def dead_letter_queue(scope: Construct, construct_id: str = "Dlq") -> sqs.Queue:
    """A dead-letter queue kept DLQ_RETENTION, encrypted, TLS only."""
    return sqs.Queue(
        scope,
        construct_id,
        retention_period=DLQ_RETENTION,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
    )


class JobQueue(Construct):
    """One work queue with its DLQ, sized for the function that consumes it."""

    def __init__(self, scope: Construct, construct_id: str, *, consumer_timeout: Duration) -> None:
        super().__init__(scope, construct_id)
        self.dlq = dead_letter_queue(self)
        self.queue = sqs.Queue(
            self,
            "Queue",
            visibility_timeout=Duration.seconds(
                consumer_timeout.to_seconds() * VISIBILITY_TIMEOUT_FACTOR
            ),
            retention_period=QUEUE_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=MAX_RECEIVE_COUNT, queue=self.dlq
            ),
        )

    def feed(self, consumer: lambda_.IFunction) -> None:
        """Deliver this queue to `consumer` in batches, with partial batch failures.

        The consumer reports failed records by message id; only those return
        to the queue (after the visibility delay it may have set on them).
        """
        # The event source grants the consumer sqs:ChangeMessageVisibility with
        # the rest of the consume actions: a retryable record gets its own
        # backoff that way, on its receipt handle, before it is reported failed.
        consumer.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=BATCH_SIZE,
                max_batching_window=MAX_BATCHING_WINDOW,
                report_batch_item_failures=True,
            )
        )
