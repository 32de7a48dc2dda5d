"""SQS queues: bridge -> submit / result functions, and the workflow engine's two.

Each queue has a dead-letter queue: a message received MAX_RECEIVE_COUNT times
without being deleted (a poison message, or one retried past its budget) is
moved there instead of cycling forever.

The workflow's run events travel on a FIFO queue (one message group per run, so
a run's events are applied in order; the sender names each message's
deduplication id), its timers on a standard queue, whose per-message
DelaySeconds (up to 15 minutes) a FIFO queue does not offer.
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
"""Records per invocation of a consumer (also the most a FIFO event source takes)."""

MAX_BATCHING_WINDOW = Duration.seconds(0)
"""No waiting to fill a batch: dispatch latency matters more than batch size."""

DLQ_RETENTION = Duration.days(14)
"""The maximum SQS allows: time to inspect and redrive dead letters."""

QUEUE_RETENTION = Duration.days(4)


def dead_letter_queue(scope: Construct, construct_id: str = "Dlq", *,
                      fifo: bool = False) -> sqs.Queue:
    """A dead-letter queue kept DLQ_RETENTION, encrypted, TLS only. A FIFO queue's
    DLQ must be FIFO too. Without a queue name, CloudFormation generates one (with
    the ``.fifo`` suffix for a FIFO queue), so two stacks never clash on names."""
    return sqs.Queue(
        scope,
        construct_id,
        retention_period=DLQ_RETENTION,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        fifo=fifo or None,
        content_based_deduplication=False if fifo else None,
    )


class JobQueue(Construct):
    """One work queue with its DLQ, sized for the function that consumes it."""

    def __init__(self, scope: Construct, construct_id: str, *, consumer_timeout: Duration,
                 fifo: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.fifo = fifo
        self.dlq = dead_letter_queue(self, fifo=fifo)
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
            fifo=fifo or None,
            # The senders name every message's deduplication id (the event id): a
            # content hash would drop a second, legitimate event whose body repeats.
            content_based_deduplication=False if fifo else None,
        )

    def feed(self, consumer: lambda_.IFunction) -> None:
        """Deliver this queue to `consumer` in batches, with partial batch failures.

        The consumer reports failed records by message id; only those return
        to the queue (after the visibility delay it may have set on them). On a
        FIFO queue Lambda deletes the records not reported, so a consumer keeps a
        run's order by reporting a failed record together with the later records
        of its message group in the batch.
        """
        # The event source grants the consumer sqs:ChangeMessageVisibility with
        # the rest of the consume actions: a retryable record gets its own
        # backoff that way, on its receipt handle, before it is reported failed.
        consumer.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=BATCH_SIZE,
                # FIFO event sources take no batching window (Lambda refuses one);
                # they never wait to fill a batch either.
                max_batching_window=None if self.fifo else MAX_BATCHING_WINDOW,
                report_batch_item_failures=True,
            )
        )
