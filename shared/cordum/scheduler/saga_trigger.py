"""Starting a saga rollback from the result path.

Cordum starts the rollback on a goroutine and lets the result handler return.
A Lambda function cannot do that: once the handler returns, the process is
frozen, and a task or thread still running would stall until some later
invocation thaws it, or never run. So on Lambda the result function hands the
rollback to the saga-rollback function with an asynchronous invoke (Lambda
queues the event and retries it), and returns. Outside Lambda (local services,
tests) the rollback runs in place, awaited, with Cordum's 30 s bound.

A rollback is always of one tenant's workflow: the tenant is the failed job's
stored one, and travels with the workflow id to the rollback.
"""

from __future__ import annotations

import json
import logging
import os
import time
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cordum.scheduler.ports import RollbackTrigger
    from cordum.scheduler.saga import RollbackReport

log = logging.getLogger(__name__)

SAGA_ROLLBACK_FUNCTION_ENV = "SAGA_ROLLBACK_FUNCTION"
"""Name of the saga-rollback function; set on the result function by the stack."""
IN_PROCESS_BOUND_S = 30.0
"""Longest an in-process rollback may take (Cordum's rollback timeout)."""


class RollbackTriggerError(RuntimeError):
    """The rollback was not handed off, or (in process) did not finish.

    The stack is intact from where it stopped, so triggering again resumes it.
    """

    retryable = True


class SagaRollback(Protocol):
    """What the in-process trigger runs (:class:`~cordum.scheduler.saga.Saga`)."""

    async def rollback(self, tenant: str, workflow_id: str, *,
                       deadline: float | None = None) -> RollbackReport: ...


@cache
def _lambda_client() -> Any:
    # One client per process: creating one costs tens of milliseconds, and the
    # result function's warm invocations reuse its connection pool.
    from cordum import aws

    return aws.client("lambda")


class LambdaRollbackTrigger:
    """Invokes the saga-rollback function asynchronously with
    ``{"tenant": ..., "workflow_id": ...}``."""

    def __init__(self, function_name: str, *, client: Any = None) -> None:
        if not function_name:
            raise ValueError("function_name is required")
        self.function_name = function_name
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _lambda_client()
        return self._client

    async def trigger(self, tenant: str, workflow_id: str) -> None:
        # Called on the loop, without a thread: Lambda answers 202 as soon as the
        # event is queued, and a fatal failure inside a workflow is rare, so the
        # short stall of the batch's other records costs less than a thread that
        # could outlive a cancelled await and be frozen with the process.
        self.invoke(tenant, workflow_id)

    def invoke(self, tenant: str, workflow_id: str) -> None:
        """The blocking Invoke call (``InvocationType="Event"``)."""
        payload = json.dumps({"tenant": tenant, "workflow_id": workflow_id}).encode()
        what = f"invoke {self.function_name} for workflow {workflow_id} (tenant {tenant})"
        try:
            resp = self.client.invoke(FunctionName=self.function_name,
                                      InvocationType="Event", Payload=payload)
        except Exception as exc:
            raise RollbackTriggerError(f"{what}: {exc}") from exc
        status = resp.get("StatusCode")
        if status != 202:
            raise RollbackTriggerError(f"{what}: status {status}")
        log.info("saga rollback of %s (tenant %s) handed to %s", workflow_id, tenant,
                 self.function_name)


class InProcessRollbackTrigger:
    """Runs the rollback in place, awaited, bounded by ``bound_s``."""

    def __init__(self, saga: SagaRollback, bound_s: float = IN_PROCESS_BOUND_S) -> None:
        if bound_s <= 0:
            raise ValueError("bound_s must be > 0")
        self._saga = saga
        self.bound_s = bound_s

    async def trigger(self, tenant: str, workflow_id: str) -> None:
        what = f"saga rollback of {workflow_id} (tenant {tenant})"
        try:
            report = await self._saga.rollback(tenant, workflow_id,
                                               deadline=time.monotonic() + self.bound_s)
        except Exception as exc:
            raise RollbackTriggerError(f"{what}: {exc}") from exc
        if not report.complete:
            raise RollbackTriggerError(
                f"{what} stopped ({report.stopped}) with "
                f"{report.remaining} compensation(s) left")


def default_rollback_trigger(saga: SagaRollback | None = None,
                             env: dict[str, str] | None = None) -> RollbackTrigger:
    """The Lambda trigger when ``SAGA_ROLLBACK_FUNCTION`` is set, else in process."""
    env = dict(os.environ) if env is None else env
    function_name = env.get(SAGA_ROLLBACK_FUNCTION_ENV, "").strip()
    if function_name:
        return LambdaRollbackTrigger(function_name)
    if saga is None:
        from cordum.scheduler.saga import default_saga

        saga = default_saga()
    return InProcessRollbackTrigger(saga)
