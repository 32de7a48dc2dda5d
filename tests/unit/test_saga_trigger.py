"""Rollback triggers and the saga-rollback handler, without Redis or NATS.

The Lambda trigger is checked at the API call: a botocore Stubber asserts the
Invoke request (the function cannot run here, so nothing else is observable).
"""

from __future__ import annotations

import importlib
import json
import time

import boto3
import pytest
from botocore.stub import Stubber

from cordum.scheduler import saga_trigger
from cordum.scheduler.saga import RollbackReport
from cordum.scheduler.saga_trigger import (
    InProcessRollbackTrigger,
    LambdaRollbackTrigger,
    RollbackTriggerError,
    default_rollback_trigger,
)
from tests.helpers import run


def lambda_client():
    return boto3.client("lambda", region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


class FakeSaga:
    """Stands in for Saga.rollback: records the call, answers a fixed report or error."""

    def __init__(self, report: RollbackReport | None = None, error: Exception | None = None,
                 ) -> None:
        self.report = report
        self.error = error
        self.calls: list[tuple[str, str, float | None]] = []

    async def rollback(self, tenant: str, workflow_id: str, *, deadline: float | None = None
                       ) -> RollbackReport:
        self.calls.append((tenant, workflow_id, deadline))
        if self.error is not None:
            raise self.error
        return self.report or RollbackReport(workflow_id, tenant=tenant)


# ---------------------------------------------------------------- Lambda trigger


def test_lambda_trigger_invokes_the_function_asynchronously_with_tenant_and_workflow():
    client = lambda_client()
    trigger = LambdaRollbackTrigger("cordum-saga-rollback", client=client)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke", {"StatusCode": 202},
            expected_params={"FunctionName": "cordum-saga-rollback",
                             "InvocationType": "Event",
                             "Payload": json.dumps({"tenant": "acme",
                                                    "workflow_id": "wf-1"}).encode()})
        run(trigger.trigger("acme", "wf-1"))
        stub.assert_no_pending_responses()


def test_lambda_trigger_reports_a_failed_invoke():
    client = lambda_client()
    trigger = LambdaRollbackTrigger("cordum-saga-rollback", client=client)
    with Stubber(client) as stub:
        stub.add_client_error("invoke", service_error_code="TooManyRequestsException",
                              http_status_code=429)
        with pytest.raises(RollbackTriggerError, match="wf-1"):
            run(trigger.trigger("acme", "wf-1"))


def test_lambda_trigger_rejects_an_unexpected_status():
    client = lambda_client()
    trigger = LambdaRollbackTrigger("cordum-saga-rollback", client=client)
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 200})
        with pytest.raises(RollbackTriggerError, match="status 200"):
            run(trigger.trigger("acme", "wf-1"))


def test_lambda_client_is_created_lazily_and_shared(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # Without credentials in the environment botocore would ask the EC2 metadata service.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    saga_trigger._lambda_client.cache_clear()
    first = LambdaRollbackTrigger("fn")
    second = LambdaRollbackTrigger("fn")
    assert first._client is None
    assert first.client is second.client
    saga_trigger._lambda_client.cache_clear()


# ---------------------------------------------------------------- in-process trigger


def test_in_process_trigger_runs_the_rollback_with_its_bound():
    saga = FakeSaga()
    trigger = InProcessRollbackTrigger(saga)
    before = time.monotonic()
    run(trigger.trigger("acme", "wf-1"))
    (tenant, workflow_id, deadline), = saga.calls
    assert (tenant, workflow_id) == ("acme", "wf-1")
    assert deadline is not None and before + 29 < deadline <= time.monotonic() + 30


def test_in_process_trigger_reports_a_rollback_that_failed_or_stopped():
    failing = InProcessRollbackTrigger(FakeSaga(error=RuntimeError("nats down")))
    with pytest.raises(RollbackTriggerError, match="nats down"):
        run(failing.trigger("acme", "wf-1"))
    stopped = RollbackReport("wf-1", stopped="deadline", remaining=3)
    partial = InProcessRollbackTrigger(FakeSaga(report=stopped))
    with pytest.raises(RollbackTriggerError, match="3 compensation"):
        run(partial.trigger("acme", "wf-1"))


def test_default_trigger_follows_the_environment():
    saga = FakeSaga()
    on_lambda = default_rollback_trigger(saga, env={"SAGA_ROLLBACK_FUNCTION": "cordum-saga"})
    assert isinstance(on_lambda, LambdaRollbackTrigger)
    assert on_lambda.function_name == "cordum-saga"
    assert isinstance(default_rollback_trigger(saga, env={}), InProcessRollbackTrigger)


# ---------------------------------------------------------------- handler


class Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def handler_module(monkeypatch):
    module = importlib.import_module("functions.saga_rollback")

    def use(saga: FakeSaga):
        monkeypatch.setattr(module, "default_saga", lambda: saga)
        return module

    return use


@pytest.mark.parametrize("event", [{}, {"workflow_id": ""}, {"workflow_id": 7}, None,
                                   {"tenant": "acme"}])
def test_handler_answers_an_event_without_workflow_id(handler_module, event):
    saga = FakeSaga()
    module = handler_module(saga)
    assert module.handler(event, Context(60_000)) == {"error": "workflow_id required"}
    assert saga.calls == []


@pytest.mark.parametrize("event", [{"workflow_id": "wf-1"}, {"workflow_id": "wf-1", "tenant": " "},
                                   {"workflow_id": "wf-1", "tenant": 7}])
def test_handler_answers_an_event_without_tenant(handler_module, event):
    # An event of the earlier shape names no tenant: no saga can be meant by it.
    saga = FakeSaga()
    module = handler_module(saga)
    assert module.handler(event, Context(60_000)) == {"error": "tenant required"}
    assert saga.calls == []


def test_handler_returns_the_counts_and_bounds_the_rollback_by_the_invocation(handler_module):
    report = RollbackReport("wf-1", tenant="acme", dispatched=["comp-a", "comp-b"], denied=1)
    saga = FakeSaga(report=report)
    module = handler_module(saga)
    before = time.monotonic()
    out = module.handler({"tenant": "acme", "workflow_id": " wf-1 "}, Context(60_000))
    assert out == {"workflow_id": "wf-1", "tenant": "acme", "acquired": True, "dispatched": 2,
                   "denied": 1, "broken": 0, "remaining": 0, "stopped": ""}
    (tenant, workflow_id, deadline), = saga.calls
    assert (tenant, workflow_id) == ("acme", "wf-1")
    assert before + 60 - module.END_MARGIN_S - 1 < deadline <= before + 60 - module.END_MARGIN_S + 1


def test_handler_raises_when_compensations_are_left_so_lambda_retries(handler_module):
    module = handler_module(FakeSaga(report=RollbackReport("wf-1", stopped="deadline",
                                                           remaining=2)))
    with pytest.raises(module.RollbackIncomplete):
        module.handler({"tenant": "acme", "workflow_id": "wf-1"}, Context(60_000))
