"""The gateway's OpenAPI 3.0.3 document, built from the pydantic models once per container.

:data:`OPERATIONS` is the contract: Cordum's 16 in-scope operations (their
operationIds, parameters and documented statuses), the workflow operations
cordum-sdk calls, plus this document and its Swagger UI page. Answers are the
models of ``cordum.gateway.schemas``; request bodies are the models of
``cordum.gateway.models`` that validate them, so the document cannot drift from
what the gateway accepts (a workflow definition is checked by
``cordum.workflow.definition``; its schema here describes the fields that parser reads).
An operation is an :class:`~cordum.gateway.openapi_operation.Operation`; the workflow
operations are listed in :mod:`cordum.gateway.openapi_workflows`.
:func:`undocumented_routes` lists routes the resolver serves that the document
does not describe.

Beyond Cordum's spec the document lists what this gateway really answers
everywhere: 403 for a tenant the key may not act for, 429 from the rate
limiter, 503 when Redis, NATS or the key store cannot be reached, and 400 for
a malformed ``limit``. Health answers JSON (200 healthy / 503 unhealthy).
"""

from __future__ import annotations

import copy
import json
import re
import typing
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from cordum.gateway import schemas
from cordum.gateway.models import ApprovalDecisionRequest, SubmitJobRequest
from cordum.gateway.openapi_operation import AUTHENTICATED, JSON, Operation, codes
from cordum.gateway.openapi_workflows import RUNS, WF, WORKFLOW_OPERATIONS
from cordum.gateway.paths import DOCS_PATH, DOCUMENT_PATH

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver

OPENAPI_VERSION = "3.0.3"
API_VERSION = "2026-05-09.2"
"""The revision of Cordum's API spec this gateway follows."""
REF = "#/components/schemas/{model}"

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

ERROR_DESCRIPTIONS = {
    400: "Invalid request: body, path or query",
    401: "Missing or unknown credential",
    403: "Tenant access denied, or the caller's role may not do this",
    404: "Not found",
    409: "Conflict with the resource's current state",
    413: "Request body too large",
    429: "Rate limited or back-pressure; retry after Retry-After seconds",
    500: "Internal error",
    503: "Redis, NATS or the key store cannot be reached; safe to retry",
}

LIST_JOB_FILTERS = ("state", "topic", "tenant", "team", "trace_id", "updated_after",
                    "updated_before")
"""Cordum's spec lists state, topic and tenant; Cordum's gateway also filters on the rest."""
APPROVAL_CONFLICTS = ("approval_already_resolved", "approval_retryable_lock",
                      "approval_terminal_run", "approval_not_actionable")
APPROVE_CONFLICTS = APPROVAL_CONFLICTS + ("approval_stale_snapshot", "approval_stale_request")
APPROVAL_ERRORS = (400, 404, 409, *AUTHENTICATED)
APPROVAL_FORBIDDEN = "self_approval_denied, RESULT_INVALID_STATUS, tenant_access_denied, forbidden"

OPERATIONS: tuple[Operation, ...] = (
    Operation("post", "/api/v1/jobs", "submitJob", "Submit a job", "Jobs",
              schemas.SubmitJobResponse, body=SubmitJobRequest, idempotency=True,
              errors=(400, 409, 413, *AUTHENTICATED),
              notes={403: codes(("MEMORY_POLICY_VIOLATION", "tenant_access_denied")),
                     409: codes(("IDEMPOTENCY_CONFLICT",)), 429: codes(("BACKPRESSURE",))}),
    Operation("get", "/api/v1/jobs", "listJobs", "List jobs, newest first", "Jobs",
              schemas.JobList, query=("Limit", "Cursor", *LIST_JOB_FILTERS),
              errors=(400, *AUTHENTICATED)),
    Operation("get", "/api/v1/jobs/{id}", "getJob", "Get a job", "Jobs", schemas.JobDetail,
              errors=(400, 404, *AUTHENTICATED)),
    Operation("post", "/api/v1/jobs/{id}/cancel", "cancelJob", "Cancel a job", "Jobs",
              schemas.CancelJobResponse, errors=(400, 404, 409, *AUTHENTICATED)),
    Operation("get", "/api/v1/jobs/{id}/decisions", "getJobDecisions",
              "A job's safety decisions", "Jobs", list[schemas.SafetyDecision],
              errors=(400, 404, *AUTHENTICATED)),
    Operation("get", "/api/v1/approvals", "listApprovals", "Jobs waiting for approval",
              "Approvals", schemas.ApprovalList, query=("Limit", "Cursor"),
              errors=(400, *AUTHENTICATED)),
    Operation("post", "/api/v1/approvals/{job_id}/approve", "approveJob", "Approve a job",
              "Approvals", schemas.SubmitJobResponse, body=ApprovalDecisionRequest,
              errors=APPROVAL_ERRORS,
              notes={403: codes((APPROVAL_FORBIDDEN,)), 404: codes(("RESULT_INVALID_STATUS",)),
                     409: codes(APPROVE_CONFLICTS)}),
    Operation("post", "/api/v1/approvals/{job_id}/reject", "rejectJob", "Reject a job",
              "Approvals", schemas.JobIdResponse, body=ApprovalDecisionRequest,
              errors=APPROVAL_ERRORS,
              notes={403: codes((APPROVAL_FORBIDDEN,)), 404: codes(("RESULT_INVALID_STATUS",)),
                     409: codes(APPROVAL_CONFLICTS)}),
    Operation("get", "/api/v1/approvals/{job_id}/context", "getApprovalContext",
              "A workflow approval gate's context document", "Approvals",
              schemas.ApprovalContext, errors=(404, *AUTHENTICATED)),
    Operation("get", "/api/v1/dlq", "listDLQ", "Dead-letter entries (bare array)", "DLQ",
              list[schemas.DLQEntry], query=("Limit",), errors=(400, *AUTHENTICATED)),
    Operation("get", "/api/v1/dlq/page", "listDLQPaginated", "Dead-letter entries, paged",
              "DLQ", schemas.DLQPage, query=("Limit", "Cursor"), errors=(400, *AUTHENTICATED)),
    Operation("delete", "/api/v1/dlq/{job_id}", "deleteDLQEntry", "Delete a dead-letter entry",
              "DLQ", None, ok_status=204, errors=(400, 404, *AUTHENTICATED)),
    Operation("post", "/api/v1/dlq/{job_id}/retry", "retryDLQEntry",
              "Retry a dead-letter entry as a new job", "DLQ", schemas.JobIdResponse,
              errors=(400, 404, *AUTHENTICATED), notes={400: "missing topic for retry"}),
    Operation("get", "/api/v1/workers", "listWorkers", "Workers and their load", "Workers",
              schemas.WorkerList),
    Operation("get", "/api/v1/status", "getStatus", "Control-plane status", "System",
              schemas.StatusResponse),
    Operation("get", "/health", "healthCheck", "Redis and NATS answer", "System",
              schemas.HealthResponse, errors=(503,), public=True, unhealthy=True),
    Operation("get", "/api/v1/health", "healthCheckV1", "Redis and NATS answer (authenticated)",
              "System", schemas.HealthResponse, unhealthy=True),
    *WORKFLOW_OPERATIONS,
    Operation("get", DOCUMENT_PATH, "getOpenApiDocument", "This document", "Docs", dict,
              errors=(), public=True),
    Operation("get", DOCS_PATH, "getApiDocs", "Swagger UI for this document", "Docs", str,
              ok_media="text/html", errors=(), public=True),
)

TAGS = (
    ("Jobs", "Submit, read and cancel jobs."),
    ("Approvals", "Human approval of jobs held by policy (admin only)."),
    ("DLQ", "Dead-lettered jobs (admin only)."),
    ("Workers", "Worker runtime as reported by heartbeats."),
    (WF, "Workflow definitions and starting runs."),
    (RUNS, "Workflow runs: read, cancel, delete."),
    ("System", "Status and health."),
    ("Docs", "This document."),
)

PARAMETERS: dict[str, dict[str, Any]] = {
    "TenantID": {
        "name": "X-Tenant-ID", "in": "header", "required": False, "schema": {"type": "string"},
        "description": "Tenant to act for. Defaults to X-Cordum-Tenant, then the key's tenant, "
                       "then \"default\"; a key bound to another tenant gets 403. (Cordum's "
                       "spec marks it required; this gateway does not.)",
    },
    "CordumTenant": {
        "name": "X-Cordum-Tenant", "in": "header", "required": False,
        "schema": {"type": "string"},
        "description": "Sent by cordum-sdk; used only when X-Tenant-ID is absent.",
    },
    "IdempotencyKey": {
        "name": "Idempotency-Key", "in": "header", "required": False,
        "schema": {"type": "string", "format": "uuid", "maxLength": 512},
        "description": "Callers SHOULD send a UUID; any non-empty string up to 512 bytes is "
                       "accepted. A repeat answers the first job's ids.",
    },
    "Limit": {
        "name": "limit", "in": "query", "required": False,
        "schema": {"type": "integer", "default": 50, "minimum": 1},
        "description": "Page size; larger values are clamped to the server's maximum.",
    },
    "Cursor": {
        "name": "cursor", "in": "query", "required": False, "schema": {"type": "string"},
        "description": "``next_cursor`` of the previous page.",
    },
}

SECURITY_SCHEMES = {
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    "bearerAuth": {"type": "http", "scheme": "bearer",
                   "description": "The same API key as ``Authorization: Bearer <key>``."},
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _models(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in typing.get_args(tp) for m in _models(arg)]


def _schema_of(tp: Any) -> dict[str, Any]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return ref(tp.__name__)
    if typing.get_origin(tp) is list:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0])}
    if tp is dict:
        return {"type": "object", "additionalProperties": True}
    if tp is str:
        return {"type": "string"}
    raise TypeError(f"no OpenAPI schema for {tp!r}")


def to_openapi30(node: Any) -> Any:
    """Pydantic writes JSON Schema 2020-12; OpenAPI 3.0 wants ``nullable`` and no ``const``."""
    if isinstance(node, list):
        return [to_openapi30(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: to_openapi30(v) for k, v in node.items()}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[limit] = node[bound]
            node[bound] = True
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and {"type": "null"} in any_of:
        rest = [s for s in any_of if s != {"type": "null"}]
        del node["anyOf"]
        if len(rest) == 1 and "$ref" in rest[0]:
            node["allOf"] = rest
        elif len(rest) == 1:
            node = {**rest[0], **node}
        else:
            node["anyOf"] = rest
        node["nullable"] = True
    return node


def component_schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [schemas.Error, schemas.PaginatedResponse]
    for op in OPERATIONS:
        models += _models(op.ok) + ([op.body] if op.body else [])
        if op.unhealthy:
            models.append(schemas.HealthResponse)
    found: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template=REF)
        for name, sub in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if found.setdefault(name, sub) != sub:
                raise ValueError(f"two different schemas are named {name}")
    return {name: to_openapi30(found[name]) for name in sorted(found)}


def _error_response(op: Operation, status: int) -> dict[str, Any]:
    description = ERROR_DESCRIPTIONS.get(status, "Error")
    if status in op.notes:
        description += f" ({op.notes[status]})"
    if op.unhealthy and status == 503:
        description = "Unhealthy: Redis or NATS does not answer"
    answer: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": ref(op.error_type(status).__name__)}},
    }
    if status == 429:
        answer["headers"] = {"Retry-After": {
            "description": "Seconds to wait before retrying", "schema": {"type": "integer"}}}
    return answer


def _operation(op: Operation) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{([^}]+)\}", op.path)
    ]
    for name in op.query:
        if name in PARAMETERS:
            params.append({"$ref": f"#/components/parameters/{name}"})
        else:
            params.append({"name": name, "in": "query", "required": False,
                           "schema": {"type": "string"}})
    if not op.public:
        params += [{"$ref": "#/components/parameters/TenantID"},
                   {"$ref": "#/components/parameters/CordumTenant"}]
    if op.idempotency:
        params.append({"$ref": "#/components/parameters/IdempotencyKey"})
    ok: dict[str, Any] = {"description": op.summary}
    if op.ok is not None:
        ok["content"] = {op.ok_media: {"schema": _schema_of(op.ok)}}
    responses = {str(op.ok_status): ok}
    responses.update({str(s): _error_response(op, s) for s in sorted(op.errors)})
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary,
                           "tags": [op.tag], "parameters": params, "responses": responses}
    if op.body is not None:
        out["requestBody"] = {"required": True,
                              "content": {JSON: {"schema": ref(op.body.__name__)}}}
    if op.public:
        out["security"] = []
    return out


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    """The document (built once per container; treat it as read-only)."""
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "Cordum Serverless API", "version": API_VERSION,
                 "description": "Cordum's control-plane HTTP API on AWS Lambda, Redis and NATS."},
        "servers": [{"url": "/"}],
        "security": [{"apiKey": []}, {"bearerAuth": []}],
        "tags": [{"name": n, "description": d} for n, d in TAGS],
        "paths": paths,
        "components": {"schemas": component_schemas(), "parameters": PARAMETERS,
                       "securitySchemes": SECURITY_SCHEMES},
    }


@lru_cache(maxsize=8)
def document_json(server_url: str = "/") -> str:
    """The document as served, its ``servers`` set to the stage prefix it was reached under."""
    doc = copy.copy(document())
    doc["servers"] = [{"url": server_url}]
    return json.dumps(doc, separators=(",", ":"))


def operation(operation_id: str) -> Operation:
    return next(op for op in OPERATIONS if op.operation_id == operation_id)


def _shape(method: str, path: str) -> tuple[str, str]:
    """Method and path with parameter names dropped (``{id}`` and ``{job_id}`` are alike)."""
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path)


def registered_routes(app: ApiGatewayResolver) -> list[tuple[str, str]]:
    """(METHOD, OpenAPI path) of every route the resolver serves."""
    # powertools keeps its routes in these two lists and has no public accessor.
    routes = [*app._static_routes, *app._dynamic_routes]
    return sorted({(r.method.upper(), r.openapi_path) for r in routes})


def _documented(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.upper(), p) for p, item in doc["paths"].items() for m in item if m in METHODS]


def undocumented_routes(app: ApiGatewayResolver,
                        doc: dict[str, Any] | None = None) -> list[str]:
    """``"METHOD /path"`` of every registered route the document does not describe."""
    documented = {_shape(m, p) for m, p in _documented(doc or document())}
    return [f"{m} {p}" for m, p in registered_routes(app) if _shape(m, p) not in documented]


def unserved_operations(app: ApiGatewayResolver,
                        doc: dict[str, Any] | None = None) -> list[str]:
    """``"METHOD /path"`` of every documented operation no registered route serves."""
    served = {_shape(m, p) for m, p in registered_routes(app)}
    return sorted(f"{m} {p}" for m, p in _documented(doc or document())
                  if _shape(m, p) not in served)
