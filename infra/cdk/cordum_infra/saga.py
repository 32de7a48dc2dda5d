"""The saga rollback hand-off: the result function invokes saga-rollback asynchronously.

A workflow's job that fails fatally leaves compensation jobs to run; the result
function hands them to the saga-rollback function with an asynchronous invoke
(cordum.scheduler.saga_trigger) and returns. Lambda queues the event and
retries a failed invocation; a rollback that stopped part way resumes where it
stopped (functions/saga_rollback.py raises until its stack is empty).

An event Lambda gives up on (every retry failed, or it waited past
MAX_EVENT_AGE, throttled) goes to the on-failure destination, an SQS queue kept
like every dead-letter queue of the stack (DLQ_RETENTION, encrypted, TLS only)
and watched by the same depth alarm (cordum_infra.observability). Each message
is Lambda's invocation record: the event (``requestPayload``, the tenant and
workflow id) and the last error (``responsePayload``), enough to invoke the
rollback again by hand once its cause is fixed.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from constructs import Construct

from cordum_infra.queues import dead_letter_queue

SAGA_ROLLBACK_FUNCTION_ENV = "SAGA_ROLLBACK_FUNCTION"
"""The result function's setting naming the function (cordum.scheduler.saga_trigger)."""

RETRY_ATTEMPTS = 2
"""Lambda's most: a rollback cut short (a publish failed, time ran out) resumes on
each retry, about one and then two minutes later."""
MAX_EVENT_AGE = Duration.hours(1)
"""Past the retries, only throttling (the function's concurrency spent) keeps an
event waiting. Compensations that run hours after the failure surprise whoever
looks at the workflow; after an hour the event waits in the dead-letter queue,
with an alarm, for someone to decide."""


class SagaRollbackInvoke(Construct):
    """`result` may invoke `saga_rollback` asynchronously; failed events go to ``dlq``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        result: lambda_.Function,
        saga_rollback: lambda_.Function,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dlq = dead_letter_queue(self)
        """Invocation records of rollback events Lambda gave up on."""
        # Also grants the function's role sqs:SendMessage on the queue: Lambda
        # delivers the record with the function's own permissions.
        saga_rollback.configure_async_invoke(
            on_failure=destinations.SqsDestination(self.dlq),
            retry_attempts=RETRY_ATTEMPTS,
            max_event_age=MAX_EVENT_AGE,
        )
        saga_rollback.grant_invoke(result)
        result.add_environment(SAGA_ROLLBACK_FUNCTION_ENV, saga_rollback.function_name)
