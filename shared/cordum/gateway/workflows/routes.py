"""Workflow definitions (/api/v1/workflows) and runs (/api/v1/workflow-runs).

Any role reads; saving or deleting a definition and starting, rerunning, cancelling
or deleting a run need a role that may submit jobs, since each of them makes or
stops jobs. A definition's dry run needs that role too, as in Cordum: it tells which
steps' jobs the policy would let through. The work is in
``cordum.gateway.workflows.service``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.http import (
    bounded_body,
    headers,
    json_body,
    json_response,
    limit,
    principal,
    query,
    require_role,
    time_query,
)
from cordum.gateway.core.models import SUBMIT_ROLES, idempotency_key_error

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.openapi import ApiPart
    from cordum.gateway.workflows.dry_run import PolicySimulator
    from cordum.gateway.workflows.service import WorkflowService

router = Router()

IDEMPOTENCY_HEADERS = ("idempotency-key", "x-idempotency-key")
NOT_DRY = ("false", "0", "no")
"""``?dry_run=`` values that ask for a real run; any other value (or none) asks for a dry run."""


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.workflows import openapi

    return openapi.PART


def service() -> WorkflowService:
    # Built per request around the cached clients: it holds no connection of its own.
    # The workflow modules load with the first workflow request, not at cold start:
    # most of the gateway's invocations are jobs.
    from cordum.gateway.workflows.service import WorkflowService
    from cordum.workflow import wiring
    from cordum.workflow.definition_store import DefinitionStore
    from cordum.workflow.store import WorkflowStore

    cfg = settings()
    redis = deps.redis()

    def simulator() -> AbstractAsyncContextManager[PolicySimulator | None]:
        from cordum.gateway.workflows.dry_run import kernel_simulator

        return kernel_simulator(cfg.safety_kernel_addr, cfg.safety_timeout_s)

    return WorkflowService(DefinitionStore(redis), WorkflowStore(redis), wiring.default_runner(),
                           max_active_runs=cfg.workflow_max_active_runs, simulator=simulator,
                           limits=wiring.run_limits(), audit=deps.audit_trail())


def _idempotency_key(event: BaseProxyEvent) -> str:
    hdrs = headers(event)
    key = next((hdrs[h].strip() for h in IDEMPOTENCY_HEADERS if hdrs.get(h, "").strip()), "")
    problem = idempotency_key_error(key)
    if problem:
        raise InvalidRequest(f"Idempotency-Key: {problem}")
    return key


def _dry_run(event: BaseProxyEvent) -> bool:
    params = event.query_string_parameters or {}
    return "dry_run" in params and (params["dry_run"] or "").strip().lower() not in NOT_DRY


def _status(event: BaseProxyEvent) -> str:
    status = query(event, "status").strip().lower()
    from cordum.workflow.model import RunStatus

    if status and status not in RunStatus._value2member_map_:
        raise InvalidRequest(f"status must be one of {', '.join(RunStatus)}")
    return status


def _no_content() -> Response:
    return Response(status_code=204, body="")


# --------------------------------------------------------------------------- definitions


@router.get("/api/v1/workflows")
def list_workflows() -> Response:
    event = router.current_event
    who = principal(event)
    return json_response(200, runtime.run(service().list_definitions(who, limit(event))))


@router.post("/api/v1/workflows")
def create_workflow() -> Response:
    event = router.current_event
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    bounded_body(event)
    workflow_id = runtime.run(service().save_definition(who, json_body(event)))
    return json_response(201, {"id": workflow_id})


@router.get("/api/v1/workflows/<workflow_id>")
def get_workflow(workflow_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(service().get_definition(who, workflow_id)))


@router.delete("/api/v1/workflows/<workflow_id>")
def delete_workflow(workflow_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who, *SUBMIT_ROLES)
    runtime.run(service().delete_definition(who, workflow_id))
    return _no_content()


# --------------------------------------------------------------------------- runs


@router.post("/api/v1/workflows/<workflow_id>/runs")
def start_workflow_run(workflow_id: str) -> Response:
    event = router.current_event
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    bounded_body(event)
    key = _idempotency_key(event)
    body = json_body(event, required=False)
    run_id = runtime.run(service().start_run(who, workflow_id, body, idempotency_key=key,
                                             dry_run=_dry_run(event)))
    # A run's trace is the run: its jobs carry the run id as their workflow id.
    return json_response(200, {"run_id": run_id}, {"X-Trace-Id": run_id})


@router.post("/api/v1/workflows/<workflow_id>/dry-run")
def dry_run_workflow(workflow_id: str) -> Response:
    from cordum.gateway.workflows.dry_run import DEADLINE_MARGIN_S, environment_text
    from cordum.gateway.workflows.schemas import WorkflowDryRunRequest

    event = router.current_event
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    bounded_body(event)
    body = WorkflowDryRunRequest.model_validate(json_body(event, required=False), strict=True)
    end = runtime.lambda_deadline(router.lambda_context)
    answer = runtime.run(service().dry_run(
        who, workflow_id, run_input=body.input, environment=environment_text(body.environment),
        deadline=None if end is None else end - DEADLINE_MARGIN_S))
    return json_response(200, answer)


@router.get("/api/v1/workflows/<workflow_id>/runs")
def list_workflow_runs(workflow_id: str) -> Response:
    event = router.current_event
    who = principal(event)
    runs = runtime.run(service().list_workflow_runs(who, workflow_id, limit(event)))
    return json_response(200, runs)


@router.post("/api/v1/workflows/<workflow_id>/runs/<run_id>/cancel")
def cancel_workflow_run(workflow_id: str, run_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who, *SUBMIT_ROLES)
    runtime.run(service().cancel_run(who, workflow_id, run_id))
    return _no_content()


@router.get("/api/v1/workflow-runs")
def list_all_workflow_runs() -> Response:
    event = router.current_event
    who = principal(event)
    page = runtime.run(service().list_runs(
        who, limit=limit(event), cursor=query(event, "cursor"), status=_status(event),
        workflow_id=query(event, "workflow_id"), updated_after=time_query(event, "updated_after"),
        updated_before=time_query(event, "updated_before")))
    return json_response(200, page)


@router.get("/api/v1/workflow-runs/<run_id>")
def get_workflow_run(run_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(service().get_run(who, run_id)))


@router.delete("/api/v1/workflow-runs/<run_id>")
def delete_workflow_run(run_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who, *SUBMIT_ROLES)
    runtime.run(service().delete_run(who, run_id))
    return _no_content()


@router.post("/api/v1/workflow-runs/<run_id>/rerun")
def rerun_workflow_run(run_id: str) -> Response:
    from cordum.gateway.workflows.schemas import RerunWorkflowRequest

    event = router.current_event
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    bounded_body(event)
    body = RerunWorkflowRequest.model_validate(json_body(event, required=False), strict=True)
    new_id = runtime.run(service().rerun(who, run_id, from_step=body.from_step or "",
                                         dry_run=bool(body.dry_run)))
    return json_response(200, {"run_id": new_id}, {"X-Trace-Id": new_id})


@router.get("/api/v1/workflow-runs/<run_id>/timeline")
def get_run_timeline(run_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(service().timeline(who, run_id)))
