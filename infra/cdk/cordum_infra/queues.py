"""SQS queues: bridge -> submit / result functions, and the workflow engine's two.

Each queue has a dead-letter queue: a message received MAX_RECEIVE_COUNT times
without being deleted (a poison message, or one retried past its budget) is
moved there instead of cycling forever.

The workflow's run events travel on a FIFO queue (one message group per run, so
a run's events are applied in order; the sender names each message's
deduplication id), its timers on a standard queue, whose per-message
DelaySeconds (up to 15 minutes) a FIFO queue does not offer.

Every event source caps its pollers' concurrency (MaximumConcurrency): without a
cap, a backlog lets Lambda scale a queue's pollers toward 1,000 concurrent
invocations, each holding its own Redis connections (cordum_infra.functions sizes
the caps against the cache's connection budget). Context ``queueConcurrency``
overrides them, a JSON object keyed by queue name, e.g.
``-c 'queueConcurrency={"submit": 80, "result": 60}'`` (keys: submit, result,
workflow, workflow-timer; each 2 to 1000, Lambda's bounds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.settings import ContextError

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

FIFO_HIGH_THROUGHPUT: dict[str, object] = {
    "deduplication_scope": sqs.DeduplicationScope.MESSAGE_GROUP,
    "fifo_throughput_limit": sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
}
"""FIFO high-throughput mode. A plain FIFO queue takes 300 sends a second (3,000
batched) for the whole queue, one run event per step transition of every run;
in this mode the limit applies per message group (one run), and the queue as a
whole takes up to 70,000 a second in the largest regions. Deduplication is then
per group: the senders' deduplication id is the event id, unique within a run
anyway, so nothing that was dropped as a repeat before gets through now."""

QUEUE_CONCURRENCY_CONTEXT = "queueConcurrency"
"""Context key: JSON object, queue name -> MaximumConcurrency of its event source."""

DEFAULT_MAX_CONCURRENCY = {"submit": 40, "result": 30, "workflow": 15, "workflow-timer": 5}
"""Concurrent invocations each queue's pollers may run (90 together). A batch of 10
records takes one invocation about 0.1 to 0.5 s, so 40 submit invocations move
800 to 4,000 jobs a second, past the API stage's default 500 a second; results
come at most as fast as jobs, with less work each (30). The workflow's FIFO queue
is served one message group (run) at a time per invocation anyway (15), and its
timers are rare (5). With the gateway's 100 and the three ticks: 193 instances,
10 Redis connections each, within the default node's 2,000 (cordum_infra.functions)."""

MIN_MAX_CONCURRENCY = 2
MAX_MAX_CONCURRENCY = 1000
"""Lambda's bounds for an SQS event source's MaximumConcurrency."""


def parse_queue_concurrency(value: object) -> dict[str, int]:
    """Queue name -> MaximumConcurrency: DEFAULT_MAX_CONCURRENCY with the
    ``queueConcurrency`` context (None, JSON text or a mapping) over it."""
    caps = dict(DEFAULT_MAX_CONCURRENCY)
    if value is None or (isinstance(value, str) and not value.strip()):
        return caps
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ContextError(
                f"context {QUEUE_CONCURRENCY_CONTEXT} must be a JSON object, "
                f'e.g. {{"submit": 80}}: {exc}'
            ) from exc
    if not isinstance(value, Mapping):
        raise ContextError(
            f"context {QUEUE_CONCURRENCY_CONTEXT} must be a JSON object of queue -> number, "
            f'e.g. {{"submit": 80}}'
        )
    for key, count in value.items():
        if key not in caps:
            raise ContextError(
                f"context {QUEUE_CONCURRENCY_CONTEXT}: unknown queue {key!r} "
                f"(one of {', '.join(caps)})"
            )
        if (isinstance(count, bool) or not isinstance(count, int)
                or not MIN_MAX_CONCURRENCY <= count <= MAX_MAX_CONCURRENCY):
            raise ContextError(
                f"context {QUEUE_CONCURRENCY_CONTEXT}: {key} must be a whole number from "
                f"{MIN_MAX_CONCURRENCY} to {MAX_MAX_CONCURRENCY} (Lambda's bounds), got {count!r}"
            )
        caps[key] = count
    return caps


def queue_name(construct_id: str) -> str:
    """``WorkflowTimerQueue`` -> ``workflow-timer``: the queue's key in queueConcurrency."""
    words = re.findall(r"[A-Z][a-z0-9]*", construct_id.removesuffix("Queue"))
    return "-".join(word.lower() for word in words)


def dead_letter_queue(scope: Construct, construct_id: str = "Dlq", *,
                      fifo: bool = False) -> sqs.Queue:
    """A dead-letter queue kept DLQ_RETENTION, encrypted, TLS only. A FIFO queue's
    DLQ must be FIFO too, in high-throughput mode like its queue (a redrive of a
    backlog moves it at the queue's pace). Without a queue name, CloudFormation
    generates one (with the ``.fifo`` suffix for a FIFO queue), so two stacks never
    clash on names."""
    return sqs.Queue(
        scope,
        construct_id,
        retention_period=DLQ_RETENTION,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        fifo=fifo or None,
        content_based_deduplication=False if fifo else None,
        **(FIFO_HIGH_THROUGHPUT if fifo else {}),
    )


class JobQueue(Construct):
    """One work queue with its DLQ, sized for the function that consumes it."""

    def __init__(self, scope: Construct, construct_id: str, *, consumer_timeout: Duration,
                 fifo: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.fifo = fifo
        self.name = queue_name(construct_id)
        """Its key in queueConcurrency: ``SubmitQueue`` -> ``submit``."""
        self.max_concurrency = parse_queue_concurrency(
            self.node.try_get_context(QUEUE_CONCURRENCY_CONTEXT)
        ).get(self.name)
        if self.max_concurrency is None:
            raise ContextError(
                f"queue {construct_id} has no MaximumConcurrency: add {self.name!r} to "
                "DEFAULT_MAX_CONCURRENCY (cordum_infra.queues)"
            )
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
            **(FIFO_HIGH_THROUGHPUT if fifo else {}),
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
                # The pollers never run more invocations than this at once, whatever
                # the backlog (the consumer's reserved concurrency, if any, should be
                # at least as large, or Lambda throttles the batches it takes).
                max_concurrency=self.max_concurrency,
            )
        )
