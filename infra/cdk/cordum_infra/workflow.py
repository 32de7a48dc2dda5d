"""The workflow engine's two queues wired to the functions (docs/workflows.md, "How a
run moves").

A run advances on events, one message each: its start (gateway; workflow for a
subworkflow's child run), a step's job turning terminal (submit and result, the
paths that settle jobs; the replayer tick, once a held output is decided; the
reconciler tick, when a lost worker's job fails), a
child run's end or a parent's cancel (workflow), a timer coming due. Run events
go to the FIFO queue, one message group per run; timers
(a delay or a retry backoff within SQS's 15 minutes, as per-message
DelaySeconds) to the standard timer queue. The ``workflow`` function consumes
both and queues what follows; ``workflow-tick`` moves timers that were too far
out for a delayed message onto the timer queue once they come close, and
re-drives runs whose events were lost.

Each function may send only to the queues it writes, and is told only their
URLs: one that may not send to the timer queue does not know it either.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_

from cordum_infra.functions import (
    GATEWAY,
    RECONCILER_TICK,
    REPLAYER_TICK,
    RESULT,
    SUBMIT,
    WORKFLOW,
    WORKFLOW_TICK,
    CordumFunctions,
    FunctionSpec,
)
from cordum_infra.queues import JobQueue

QUEUE_URL_ENV = "WORKFLOW_QUEUE_URL"
"""Run events (FIFO): MessageGroupId = run id, MessageDeduplicationId = event id."""
TIMER_QUEUE_URL_ENV = "WORKFLOW_TIMER_QUEUE_URL"
"""Timers (standard queue): per-message DelaySeconds <= 900."""

EVENT_SENDERS: tuple[FunctionSpec, ...] = (GATEWAY, SUBMIT, RESULT, WORKFLOW, WORKFLOW_TICK,
                                           REPLAYER_TICK, RECONCILER_TICK)
"""Functions that queue run events."""
TIMER_SENDERS: tuple[FunctionSpec, ...] = (WORKFLOW, WORKFLOW_TICK)
"""Functions that queue timers."""


def _allow_send(fn: lambda_.IFunction, queue: JobQueue) -> None:
    # SendMessage alone (it covers SendMessageBatch): the sender is given the URL,
    # so it needs neither GetQueueUrl nor the queue's attributes.
    fn.add_to_role_policy(
        iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue.queue_arn])
    )


def connect_workflow(functions: CordumFunctions, *, events: JobQueue, timers: JobQueue) -> None:
    """Feed both queues to the workflow function and let the senders send."""
    consumer = functions[WORKFLOW]
    events.feed(consumer)
    timers.feed(consumer)
    for spec in EVENT_SENDERS:
        functions[spec].add_environment(QUEUE_URL_ENV, events.queue.queue_url)
        _allow_send(functions[spec], events)
    for spec in TIMER_SENDERS:
        functions[spec].add_environment(TIMER_QUEUE_URL_ENV, timers.queue.queue_url)
        _allow_send(functions[spec], timers)
