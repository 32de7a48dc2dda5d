"""EventBridge schedules driving the reconciler, the pending replayer and the
workflow reconciler.

Rate expressions bottom out at one minute; each tick function keeps its own
cadence inside the invocation (Cordum's 30 s for the reconciler and the
replayer: twice per invocation; a few seconds for the workflow reconciler),
bounded by its remaining time. Schedules may deliver twice, so the ticks still
take their TTL-hold lock.

EventBridge invokes the tick functions asynchronously. An event it could not
hand to Lambda (throttled, function missing, permission lost) is retried
under the retry policy below and then sent to the ticks' dead-letter queue,
whose depth has an alarm (observability.py): a tick that never ran leaves
stale jobs, orphans or stuck runs behind, and must not go unnoticed.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from cordum_infra.queues import dead_letter_queue

TICK_RATE = Duration.minutes(1)
"""Renders as ``rate(1 minute)``, the shortest EventBridge allows."""

TARGET_RETRY_ATTEMPTS = 2
TARGET_MAX_EVENT_AGE = Duration.minutes(1)
"""A tick that could not be delivered within a minute is superseded by the next."""

class TickSchedules(Construct):
    """One rule per tick function; `ticks` maps a name (``Reconciler``) to it."""

    def __init__(
        self, scope: Construct, construct_id: str, *, ticks: dict[str, lambda_.IFunction]
    ) -> None:
        super().__init__(scope, construct_id)
        # Each dead letter carries the error EventBridge met in its message attributes.
        self.dlq = dead_letter_queue(self)
        """Tick events EventBridge could not deliver (shared by every tick rule)."""
        self.rules: dict[str, events.Rule] = {}
        for name, fn in ticks.items():
            self.rules[name] = events.Rule(
                self,
                f"{name}TickRule",
                description=f"Cordum {name.lower()} tick",
                schedule=events.Schedule.rate(TICK_RATE),
                targets=[
                    targets.LambdaFunction(
                        fn,
                        retry_attempts=TARGET_RETRY_ATTEMPTS,
                        max_event_age=TARGET_MAX_EVENT_AGE,
                        dead_letter_queue=self.dlq,
                    )
                ],
            )
