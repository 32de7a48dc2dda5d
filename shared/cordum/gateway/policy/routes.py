"""The policy routes (docs/http-api.md, "Policy governance"): the system policy's
bundles, their snapshots, publish, rollback and audit; the kernel's evaluate,
simulate, explain, snapshots; the rules of the bundles; replay and analytics of the
caller's tenant's jobs.

Who may do what: :mod:`cordum.gateway.policy.access`. A ``~`` in a bundle id of a path
stands for ``/``; ``?bundle_id=`` names the bundle instead when given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.http import json_body, json_response, query
from cordum.gateway.policy import access
from cordum.gateway.policy.changes import bundle_key
from cordum.gateway.policy.kernel import GrpcPolicyKernel, Mode, PolicyQuestions
from cordum.gateway.policy.models import (
    MAX_BODY_BYTES,
    AnalyticsRequest,
    BundleSimulate,
    BundleWrite,
    PolicyCheck,
    ProposalReject,
    PublishRequest,
    ReplayRequest,
    RollbackRequest,
    SnapshotCreate,
)
from cordum.gateway.policy.proposals import PROPOSAL_FIELD
from cordum.gateway.policy.service import PolicyService
from cordum.gateway.policy.store import MAX_AUDIT_ENTRIES, PolicyStore

if TYPE_CHECKING:
    from typing import Any

    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.openapi import ApiPart

router = Router()

AUDIT_PAGE = 100
"""Audit entries a page holds unless ``limit`` says otherwise (at most 500)."""
TOTAL_HEADER = "X-Total-Count"
"""How many audit entries pass the filters (the page is a bare array)."""
HAS_MORE_HEADER = "X-Has-More"
OFFSET_HEADER = "X-Offset"


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.policy import openapi

    return openapi.PART


def _base_file() -> tuple[bytes, str]:
    from cordum.safety.policy_file import POLICY_FILE_NAME

    path = Path(settings().config_dir) / POLICY_FILE_NAME
    return path.read_bytes(), str(path)


def service() -> PolicyService:
    # Built per request around the cached clients: it holds no connection of its own.
    return PolicyService(PolicyStore(deps.redis()), deps.publisher(), _base_file,
                         two_person=settings().policy_two_person, audit=deps.audit_trail())


def _changed(answer: dict[str, Any] | None) -> Response:
    """200 with the change's answer; 202 when it waits for a second person's
    confirmation (``{"proposal", "status"}``); 204 for a delete that is done."""
    if answer is None:
        return Response(status_code=204, body="")
    return json_response(202 if PROPOSAL_FIELD in answer else 200, answer)


def questions() -> PolicyQuestions:
    cfg = settings()
    return PolicyQuestions(GrpcPolicyKernel(cfg.safety_kernel_addr, cfg.safety_timeout_s))


def _body(event: BaseProxyEvent, *, required: bool = True) -> dict[str, Any]:
    """The JSON body, at most 2 MiB (400 beyond)."""
    if len((event.body or "").encode()) > MAX_BODY_BYTES:
        raise InvalidRequest(f"request body larger than {MAX_BODY_BYTES} bytes",
                             "request_body_too_large")
    return json_body(event, required=required)


def _bundle_id(event: BaseProxyEvent, raw: str) -> str:
    return query(event, "bundle_id") or bundle_key(raw)


def _count(event: BaseProxyEvent, name: str, default: int, most: int) -> int:
    raw = query(event, name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer") from None
    if value < 0 or (name == "limit" and value == 0):
        raise InvalidRequest(f"{name} must be {'positive' if name == 'limit' else 'at least 0'}")
    return min(value, most)


# -- bundles: the static paths first, so "snapshots" is never taken for a bundle id --

@router.get("/api/v1/policy/bundles")
def list_bundles() -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(service().bundles()))


@router.get("/api/v1/policy/bundles/snapshots")
def list_bundle_snapshots() -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(service().snapshots()))


@router.post("/api/v1/policy/bundles/snapshots")
def create_bundle_snapshot() -> Response:
    event = router.current_event
    who = access.system_writer(event)
    body = SnapshotCreate.model_validate(_body(event, required=False))
    return json_response(200, runtime.run(service().take_snapshot(who, body.note)))


@router.get("/api/v1/policy/bundles/snapshots/<snapshot_id>")
def get_bundle_snapshot(snapshot_id: str) -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(service().snapshot(snapshot_id)))


@router.get("/api/v1/policy/bundles/<bundle_id>")
def get_bundle(bundle_id: str) -> Response:
    event = router.current_event
    access.reader(event)
    return json_response(200, runtime.run(service().bundle(_bundle_id(event, bundle_id))))


@router.put("/api/v1/policy/bundles/<bundle_id>")
def put_bundle(bundle_id: str) -> Response:
    event = router.current_event
    who = access.system_writer(event)
    body = BundleWrite.model_validate(_body(event))
    return _changed(runtime.run(service().put_bundle(who, _bundle_id(event, bundle_id), body)))


@router.delete("/api/v1/policy/bundles/<bundle_id>")
def delete_bundle(bundle_id: str) -> Response:
    event = router.current_event
    who = access.system_writer(event)
    return _changed(runtime.run(service().delete_bundle(who, _bundle_id(event, bundle_id))))


@router.post("/api/v1/policy/bundles/<bundle_id>/simulate")
def simulate_bundle(bundle_id: str) -> Response:
    event = router.current_event
    who = access.asker(event)
    body = BundleSimulate.model_validate(_body(event))
    answer = runtime.run(service().simulate_bundle(who, _bundle_id(event, bundle_id), body))
    return json_response(200, answer)


# -- publish, rollback, audit ---------------------------------------------------------

@router.post("/api/v1/policy/publish")
def publish_policy() -> Response:
    event = router.current_event
    who = access.system_writer(event)
    body = PublishRequest.model_validate(_body(event, required=False))
    return _changed(runtime.run(service().publish(who, body)))


@router.post("/api/v1/policy/rollback")
def rollback_policy() -> Response:
    event = router.current_event
    who = access.system_writer(event)
    body = RollbackRequest.model_validate(_body(event))
    return _changed(runtime.run(service().rollback(who, body)))


# -- two people for a change ----------------------------------------------------------

@router.get("/api/v1/policy/proposals")
def list_proposals() -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(service().proposals()))


@router.get("/api/v1/policy/proposals/<proposal_id>")
def get_proposal(proposal_id: str) -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(service().proposal(proposal_id)))


@router.post("/api/v1/policy/proposals/<proposal_id>/confirm")
def confirm_proposal(proposal_id: str) -> Response:
    who = access.system_writer(router.current_event)
    return json_response(200, runtime.run(service().confirm(who, proposal_id)))


@router.post("/api/v1/policy/proposals/<proposal_id>/reject")
def reject_proposal(proposal_id: str) -> Response:
    event = router.current_event
    who = access.system_writer(event)
    body = ProposalReject.model_validate(_body(event, required=False))
    return json_response(200, runtime.run(service().reject(who, proposal_id, body.reason)))


@router.get("/api/v1/policy/audit")
def policy_audit() -> Response:
    event = router.current_event
    access.reader(event)
    page = runtime.run(service().audit(
        limit=_count(event, "limit", AUDIT_PAGE, MAX_AUDIT_ENTRIES),
        offset=_count(event, "offset", 0, MAX_AUDIT_ENTRIES),
        action=query(event, "action"), rule_id=query(event, "rule_id"),
        resource_type=query(event, "type"), search=query(event, "search")))
    # A bare array, as cordum-sdk reads it; the page's place is in the headers.
    return json_response(200, page.items, headers={
        TOTAL_HEADER: str(page.total), HAS_MORE_HEADER: str(page.has_more).lower(),
        OFFSET_HEADER: str(page.offset)})


@router.get("/api/v1/policy/rules")
def policy_rules() -> Response:
    event = router.current_event
    access.reader(event)
    include = query(event, "include_disabled").strip().lower() in ("1", "true", "yes")
    return json_response(200, runtime.run(service().rules(include)))


# -- the kernel -----------------------------------------------------------------------

def _ask(mode: Mode) -> Response:
    event = router.current_event
    who = access.asker(event)
    body = PolicyCheck.model_validate(_body(event))
    return json_response(200, runtime.run(questions().ask(mode, body, who)))


@router.post("/api/v1/policy/evaluate")
def evaluate_policy() -> Response:
    return _ask(Mode.EVALUATE)


@router.post("/api/v1/policy/simulate")
def simulate_policy() -> Response:
    return _ask(Mode.SIMULATE)


@router.post("/api/v1/policy/explain")
def explain_policy() -> Response:
    return _ask(Mode.EXPLAIN)


@router.get("/api/v1/policy/snapshots")
def kernel_snapshots() -> Response:
    access.reader(router.current_event)
    return json_response(200, runtime.run(questions().snapshots()))


# -- replay and analytics of the caller's tenant's jobs ---------------------------------

@router.post("/api/v1/policy/replay")
def replay_policy() -> Response:
    from cordum.gateway.policy.replay import PolicyReplay, replay_policy

    event = router.current_event
    who = access.asker(event)
    body = ReplayRequest.model_validate(_body(event))
    tenant = access.jobs_tenant(event, who, body.tenant, body.filters.tenant)
    redis = deps.redis()

    async def answer() -> dict[str, Any]:
        policy = await replay_policy(PolicyStore(redis), _base_file, body)
        return await PolicyReplay(redis, policy, tenant).run(
            body, deadline=runtime.lambda_deadline(router.lambda_context))

    return json_response(200, runtime.run(answer()))


@router.post("/api/v1/policy/analytics")
def policy_analytics() -> Response:
    from cordum.gateway.policy.analytics import PolicyAnalytics

    event = router.current_event
    who = access.reader(event)
    body = AnalyticsRequest.model_validate(_body(event))
    tenant = access.jobs_tenant(event, who, body.tenant)
    work = PolicyAnalytics(deps.redis(), tenant).run(
        body, deadline=runtime.lambda_deadline(router.lambda_context))
    return json_response(200, runtime.run(work))
