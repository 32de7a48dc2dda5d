"""The gateway's OpenAPI 3.0.3 document, built from the pydantic models once per container.

The contract is the parts ``cordum.gateway.app`` publishes (``cordum.gateway.docs.contract``),
one per feature, each an :class:`~cordum.gateway.core.openapi.ApiPart` of the feature's
``openapi`` module: Cordum's 16 in-scope operations (their operationIds, parameters and
documented statuses), the workflow operations cordum-sdk calls, plus this document and
its Swagger UI page (:data:`PART`). :data:`OPERATIONS` lists them all, in the
document's order. Answers are the features' ``schemas`` models; request bodies are the
models that validate them (the features' ``models``), so the document cannot drift
from what the gateway accepts (a workflow definition is checked by
``cordum.workflow.definition``; its schema here describes the fields that parser reads).
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

from cordum.gateway.core import schemas
from cordum.gateway.core.openapi import JSON, ApiPart, Operation
from cordum.gateway.docs import contract
from cordum.gateway.docs.paths import DOCS_PATH, DOCUMENT_PATH

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

PART = ApiPart(
    operations=(
        Operation("get", DOCUMENT_PATH, "getOpenApiDocument", "This document", "Docs", dict,
                  errors=(), public=True),
        Operation("get", DOCS_PATH, "getApiDocs", "Swagger UI for this document", "Docs", str,
                  ok_media="text/html", errors=(), public=True),
    ),
    tags=(("Docs", "This document."),),
)
"""The docs feature's own part: this document and its page."""

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


def operations() -> tuple[Operation, ...]:
    """Every operation of the document, in its order (the published parts')."""
    return tuple(op for part in contract.parts() for op in part.operations)


def __getattr__(name: str) -> tuple[Operation, ...]:
    # OPERATIONS (PEP 562): the features' operations are the app's to publish, so this
    # module has no constant of them; the name reads them when it is used.
    if name == "OPERATIONS":
        return operations()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tags() -> list[dict[str, str]]:
    """The document's tags, each part's in the parts' order."""
    return [{"name": n, "description": d} for part in contract.parts() for n, d in part.tags]


def component_schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [schemas.Error, schemas.PaginatedResponse]
    for op in operations():
        models += _models(op.ok) + ([op.body] if op.body else [])
        for _, body, _ in op.also:
            models += _models(body)
        if op.unhealthy is not None:
            models.append(op.unhealthy)
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
    if op.unhealthy is not None and status == 503:
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
    for status, body, description in op.also:
        responses[str(status)] = {"description": description,
                                  "content": {JSON: {"schema": _schema_of(body)}}}
    responses.update({str(s): _error_response(op, s) for s in sorted(op.errors)})
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary,
                           "tags": [op.tag], "parameters": params, "responses": responses}
    if op.body is not None:
        out["requestBody"] = {"required": True,
                              "content": {JSON: {"schema": ref(op.body.__name__)}}}
    if op.public:
        out["security"] = []
    if op.elsewhere:
        out["description"] = op.elsewhere
    return out


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    """The document (built once per container; treat it as read-only)."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations():
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "Cordum Serverless API", "version": API_VERSION,
                 "description": "Cordum's control-plane HTTP API on AWS Lambda, Redis and NATS."},
        "servers": [{"url": "/"}],
        "security": [{"apiKey": []}, {"bearerAuth": []}],
        "tags": tags(),
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
    return next(op for op in operations() if op.operation_id == operation_id)


def _shape(method: str, path: str) -> tuple[str, str]:
    """Method and path with parameter names dropped (``{id}`` and ``{job_id}`` are alike)."""
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path)


def registered_routes(app: ApiGatewayResolver) -> list[tuple[str, str]]:
    """(METHOD, OpenAPI path) of every route the resolver serves. The gateway's app
    includes a feature's routes on its first request (``load_all`` includes them all)."""
    load_all = getattr(app, "load_all", None)
    if callable(load_all):
        load_all()
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
    served |= {_shape(op.method, op.path) for op in operations() if op.elsewhere}
    return sorted(f"{m} {p}" for m, p in _documented(doc or document())
                  if _shape(m, p) not in served)
