"""The OpenAPI document: its shape, that it covers every route, and that the live gateway
answers as it says (a hypothesis run driven by the served document, real Redis and NATS)."""

from __future__ import annotations

import json
import re
import string
import typing
import uuid
from datetime import UTC
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from cordum import config, protocol, runtime
from cordum.gateway import app as gateway
from cordum.gateway.core import deps, schemas
from cordum.gateway.core import openapi as openapi_operation
from cordum.gateway.docs import openapi
from cordum.store.jobs import JobState, JobStore, NewJob
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import event, gateway_process

# The 16 operations of Cordum's API that this gateway serves (the routes of docs/http-api.md).
CORDUM_OPERATIONS = {
    ("post", "/api/v1/jobs"): "submitJob",
    ("get", "/api/v1/jobs"): "listJobs",
    ("get", "/api/v1/jobs/{id}"): "getJob",
    ("post", "/api/v1/jobs/{id}/cancel"): "cancelJob",
    ("get", "/api/v1/jobs/{id}/decisions"): "getJobDecisions",
    ("get", "/api/v1/approvals"): "listApprovals",
    ("post", "/api/v1/approvals/{job_id}/approve"): "approveJob",
    ("post", "/api/v1/approvals/{job_id}/reject"): "rejectJob",
    ("get", "/api/v1/dlq"): "listDLQ",
    ("get", "/api/v1/dlq/page"): "listDLQPaginated",
    ("delete", "/api/v1/dlq/{job_id}"): "deleteDLQEntry",
    ("post", "/api/v1/dlq/{job_id}/retry"): "retryDLQEntry",
    ("get", "/api/v1/workers"): "listWorkers",
    ("get", "/api/v1/status"): "getStatus",
    ("get", "/health"): "healthCheck",
    ("get", "/api/v1/health"): "healthCheckV1",
}
PUBLIC = {"healthCheck", "getOpenApiDocument", "getApiDocs"}
ANYWHERE = {401, 403, 404, 429}
"""Statuses any operation may answer (auth, tenant, unknown route, rate limit)."""


def header(resp: dict[str, Any], name: str) -> str | None:
    for source in (resp.get("headers") or {}, resp.get("multiValueHeaders") or {}):
        for key, value in source.items():
            if key.lower() == name.lower():
                return value[0] if isinstance(value, list) else value
    return None


def served_document() -> dict[str, Any]:
    resp = gateway.handle(event("GET", openapi.DOCUMENT_PATH, content_type=None), None)
    assert resp["statusCode"] == 200
    return json.loads(resp["body"])


# --- the document ----------------------------------------------------------------------

def walk(node: Any, where: str = "#"):
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{where}/{i}")


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/components/"), ref
        kind, name = ref.split("/")[2:4]
        node = doc["components"][kind][name]
    return node


def operations(doc: dict[str, Any]):
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in openapi.METHODS:
                yield method, path, op


def test_document_is_openapi_3_0_in_shape():
    doc = served_document()
    assert doc["openapi"] == "3.0.3"
    assert doc["info"]["title"] and doc["info"]["version"]
    # Every $ref resolves.
    for _, node in walk(doc):
        if "$ref" in node:
            resolve(doc, node)
    # 3.1 / JSON Schema 2020-12 forms are not 3.0.
    for where, node in walk(doc["components"]["schemas"]):
        assert "const" not in node and "$defs" not in node and "prefixItems" not in node, where
        assert not isinstance(node.get("type"), list) and node.get("type") != "null", where
        for combo in ("anyOf", "oneOf"):
            assert {"type": "null"} not in node.get(combo, []), where
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids)), "operationIds are not unique"
    for method, path, op in operations(doc):
        assert op["responses"], f"{method} {path} has no responses"
        params = [resolve(doc, p) for p in op.get("parameters", [])]
        assert len({(p["name"], p["in"]) for p in params}) == len(params), path
        path_params = {p["name"] for p in params if p["in"] == "path"}
        assert path_params == set(re.findall(r"\{([^}]+)\}", path)), path
        assert all(p["required"] for p in params if p["in"] == "path")
        for status, answer in op["responses"].items():
            assert answer["description"], f"{path} {status}"
    schemes = doc["components"]["securitySchemes"]
    assert schemes["apiKey"] == {"type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert schemes["bearerAuth"]["type"] == "http" and schemes["bearerAuth"]["scheme"] == "bearer"
    assert doc["security"] == [{"apiKey": []}, {"bearerAuth": []}]


def test_document_has_cordums_operations_parameters_and_errors():
    doc = served_document()
    by_id = {op["operationId"]: (method, path, op) for method, path, op in operations(doc)}
    for (method, path), op_id in CORDUM_OPERATIONS.items():
        assert by_id[op_id][:2] == (method, path), op_id
    for op_id, (_, _, op) in by_id.items():
        names = {resolve(doc, p)["name"] for p in op.get("parameters", [])}
        if op_id in PUBLIC:
            assert op["security"] == [] and "X-Tenant-ID" not in names, op_id
        else:
            assert "security" not in op and {"X-Tenant-ID", "X-Cordum-Tenant"} <= names, op_id
        for status, answer in op["responses"].items():
            if int(status) < 400:
                continue
            schema = answer["content"]["application/json"]["schema"]
            unhealthy = op_id in ("healthCheck", "healthCheckV1") and status == "503"
            assert schema == openapi.ref("HealthResponse" if unhealthy else "Error"), op_id
            if status == "429":
                assert answer["headers"]["Retry-After"]["schema"] == {"type": "integer"}
    submit = by_id["submitJob"][2]
    idem = [resolve(doc, p) for p in submit["parameters"]
            if resolve(doc, p)["name"] == "Idempotency-Key"][0]
    assert idem["in"] == "header" and idem["schema"]["maxLength"] == 512
    assert submit["requestBody"]["content"]["application/json"]["schema"] == \
        openapi.ref("SubmitJobRequest")
    assert set(submit["responses"]) >= {"200", "400", "401", "403", "409", "413", "429", "500"}
    for op_id in ("listJobs", "listApprovals", "listDLQPaginated"):
        names = {resolve(doc, p)["name"] for p in by_id[op_id][2]["parameters"]}
        assert {"limit", "cursor"} <= names, op_id
    limit = doc["components"]["parameters"]["Limit"]["schema"]
    assert (limit["type"], limit["default"]) == ("integer", 50)
    ok = {op_id: by_id[op_id][2]["responses"] for op_id in by_id}
    assert ok["deleteDLQEntry"]["204"].get("content") is None
    assert ok["listDLQ"]["200"]["content"]["application/json"]["schema"] == \
        {"type": "array", "items": openapi.ref("DLQEntry")}
    assert ok["getJobDecisions"]["200"]["content"]["application/json"]["schema"]["type"] == "array"
    for op_id in ("healthCheck", "healthCheckV1"):
        assert set(ok[op_id]["200"]["content"]) == {"application/json"}
        assert "503" in ok[op_id]


def test_schemas_keep_cordums_names_types_and_nullability():
    comp = served_document()["components"]["schemas"]
    detail = comp["JobDetail"]["properties"]
    assert detail["priority"]["type"] == "integer"
    assert detail["labels"]["type"] == "object" and "nullable" not in detail["labels"]
    assert detail["labels"]["additionalProperties"] == {"type": "string"}
    assert detail["started_at"]["nullable"] is True and detail["started_at"]["format"] == \
        "date-time"
    assert "nullable" not in detail["created_at"] and "nullable" not in detail["delegation"]
    assert detail["decisions"]["nullable"] is True
    assert detail["decisions"]["items"] == openapi.ref("SafetyDecision")
    assert comp["SafetyDecision"]["properties"]["action"]["enum"] == [
        "ALLOW", "DENY", "REQUIRE_APPROVAL", "THROTTLE", "ALLOW_WITH_CONSTRAINTS", "UNAVAILABLE"]
    assert comp["ApprovalItem"]["properties"]["decision"]["enum"] == [
        "PENDING", "APPROVED", "REJECTED"]
    assert comp["ApprovalItem"]["properties"]["job"] == openapi.ref("JobSummary")
    assert comp["WorkerList"]["required"] == ["items"]
    assert comp["WorkerRuntime"]["required"] == ["worker_id"]
    assert comp["Error"]["required"] == ["error", "status"]
    assert comp["ApprovalDecisionRequest"]["required"] == ["reason"]
    assert comp["DelegationLineageView"]["properties"]["verified_at"]["type"] == "integer"
    assert comp["StatusResponse"]["properties"]["license"]["nullable"] is True
    assert comp["StatusResponse"]["properties"]["build"] == openapi.ref("BuildInfo")
    for page in ("JobList", "ApprovalList", "DLQPage"):
        props = comp[page]["properties"]
        assert props["next_cursor"] == {"type": "string", "nullable": True,
                                        "title": "Next Cursor",
                                        "description": props["next_cursor"]["description"]}
        assert "required" not in comp[page]
    for name, schema in comp.items():
        if name != "SubmitJobRequest":
            assert schema.get("additionalProperties") is True, name
        for field, prop in schema.get("properties", {}).items():
            assert "default" not in prop or name == "SubmitJobRequest", f"{name}.{field}"


def test_document_describes_every_registered_route():
    assert openapi.undocumented_routes(gateway.app) == []


def test_undocumented_route_is_reported():
    app = APIGatewayRestResolver()

    @app.get("/api/v1/jobs/<whatever>")
    def _documented(whatever: str) -> Response:
        raise AssertionError

    @app.post("/api/v1/extra/<thing>")
    def _extra(thing: str) -> Response:
        raise AssertionError

    @app.delete("/api/v1/jobs")
    def _wrong_method() -> Response:
        raise AssertionError

    assert openapi.undocumented_routes(app) == ["DELETE /api/v1/jobs", "POST /api/v1/extra/{thing}"]
    assert "GET /api/v1/status" in openapi.unserved_operations(app)


def test_every_documented_operation_is_served():
    assert openapi.unserved_operations(gateway.app) == []


def test_document_and_docs_page_are_public_and_name_the_stage():
    resp = gateway.handle(event("GET", openapi.DOCUMENT_PATH, content_type=None, stage="prod"),
                          None)
    assert resp["statusCode"] == 200 and header(resp, "Content-Type") == "application/json"
    doc = json.loads(resp["body"])
    assert doc["servers"] == [{"url": "/prod"}]
    assert {k: v for k, v in doc.items() if k != "servers"} == \
        {k: v for k, v in openapi.document().items() if k != "servers"}
    # A path API Gateway did not see under a stage (e.g. a test harness) serves "/".
    bare = event("GET", openapi.DOCUMENT_PATH, content_type=None)
    bare["requestContext"]["path"] = openapi.DOCUMENT_PATH
    assert json.loads(gateway.handle(bare, None)["body"])["servers"] == [{"url": "/"}]
    page = gateway.handle(event("GET", openapi.DOCS_PATH, content_type=None, stage="prod"), None)
    assert page["statusCode"] == 200
    assert header(page, "Content-Type").startswith("text/html")
    assert re.search(r"swagger-ui-dist@\d+\.\d+\.\d+/swagger-ui-bundle\.js", page["body"])
    assert 'url: "/prod/api/v1/openapi.json"' in page["body"]


def test_document_is_built_once_per_container():
    assert openapi.document() is openapi.document()


# --- the live gateway against the document -----------------------------------------------

class Env:
    def __init__(self, unique: str) -> None:
        self.tenant = f"oa-{unique}"
        self.admin_key = f"oa-admin-{unique}"
        self.user_key = f"oa-user-{unique}"
        self.job_ids: set[str] = set()
        self.seeded: dict[str, str] = {}


async def _seed(env: Env) -> None:
    store = JobStore(runtime.redis_client())

    async def job(name: str, state: JobState, meta: dict[str, str]) -> str:
        job_id = f"oa-{name}-{uuid.uuid4().hex[:10]}"
        req = protocol.JobRequest(job_id=job_id, topic="job.default", priority=1,
                                  context_ptr=protocol.pointer(protocol.context_key(job_id)),
                                  tenant_id=env.tenant, env={"tenant_id": env.tenant},
                                  labels={"_source": "api"})
        await store.create(NewJob(
            job_id=job_id, trace_id=job_id, tenant=env.tenant, topic="job.default",
            context=json.dumps({"prompt": f"openapi {name}", "topic": "job.default"}),
            request=json_format.MessageToJson(req, indent=None),
            meta={"labels": json.dumps({"_source": "api"}), "priority": "1", **meta},
            state=state))
        env.job_ids.add(job_id)
        return job_id

    env.seeded["pending"] = await job("pending", JobState.PENDING, {})
    env.seeded["gated"] = await job("gated", JobState.APPROVAL_REQUIRED, {
        "safety_decision": "REQUIRE_APPROVAL", "safety_reason": "needs a person",
        "safety_rule_id": "rule-1", "safety_approval_required": "true"})
    failed = await job("failed", JobState.PENDING, {})
    await store.transition(failed, [JobState.FAILED], fields={"failure_reason": "boom"},
                           dlq={"topic": "job.default", "status": "FAILED", "reason": "boom",
                                "reason_code": "no_workers"})
    env.seeded["failed"] = failed


async def _cleanup(env: Env) -> None:
    client = runtime.redis_client()
    ids = set(env.job_ids)
    ids |= {m.decode() for m in await client.smembers(f"job:tenant:active:{env.tenant}")}
    doomed = []
    async for key in client.scan_iter(match="*", count=1000):
        text = key.decode(errors="replace")
        if env.tenant in text or any(job_id in text for job_id in ids):
            doomed.append(key)
    if doomed:
        await client.delete(*doomed)
    shared = ["job:recent", "job:deadline", "dlq:index", *(f"job:index:{s.lower()}"
                                                           for s in JobState)]
    for key in shared:
        if ids:
            await client.zrem(key, *ids)


@pytest.fixture
def live(monkeypatch, unique, kernel):
    """The gateway on a tenant of its own, with seeded jobs; submits are checked by the
    kernel serving the shipped policy, as deployed."""
    env = Env(unique)
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
        {"key": env.admin_key, "tenant": env.tenant, "role": "admin", "principal_id": "ops"},
        {"key": env.user_key, "tenant": env.tenant, "role": "user"}]))
    for var in ("CORDUM_API_KEY", "CORDUM_API_KEYS_PATH", "CORDUM_API_KEYS_SSM_PARAMETER",
                "CORDUM_API_KEYS_SECRET_ARN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("NATS_URL", NATS_URL)
    monkeypatch.setenv("SAFETY_KERNEL_ADDR", kernel)
    # The run sends hundreds of requests with one key; the limiter would answer most of them.
    monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()
    with gateway_process():
        runtime.run(_seed(env))
        try:
            yield env
        finally:
            runtime.run(_cleanup(env))


# Values of the wrong JSON type for any field.
WRONG = st.one_of(st.integers(-10, 10**12), st.floats(allow_nan=False, allow_infinity=False),
                  st.booleans(), st.none(), st.text(max_size=5),
                  st.lists(st.integers(), max_size=2),
                  st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)
HUGE = st.sampled_from([1_100_000, 50_001, 300_000, 5_000]).map(lambda n: "x" * n)
HEADER_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_.:/ ", max_size=40)


def values(doc: dict[str, Any], schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that satisfy ``schema`` (as far as a 3.0 schema says)."""
    schema = resolve(doc, schema)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(resolve(doc, part))
        schema = {**merged, **{k: v for k, v in schema.items() if k != "allOf"}}
    strategy = _values(doc, schema)
    return st.none() | strategy if schema.get("nullable") else strategy


def _values(doc: dict[str, Any], schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        top = min(schema.get("maxLength", 40), 40)
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= top)
        if schema.get("format") == "date-time":
            return st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
        if schema.get("format") == "uuid":
            return st.uuids().map(str)
        return st.text(min_size=schema.get("minLength", 0), max_size=top)
    if kind == "integer":
        return st.integers(schema.get("minimum", -(2**31)), schema.get("maximum", 2**40))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(values(doc, schema.get("items", {})), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 3), 3))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            return st.fixed_dictionaries(
                {k: values(doc, v) for k, v in props.items() if k in required},
                optional={k: values(doc, v) for k, v in props.items() if k not in required})
        extra = schema.get("additionalProperties", True)
        return st.dictionaries(st.text(max_size=8),
                               values(doc, extra) if isinstance(extra, dict) else JSON_VALUES,
                               max_size=3)
    return JSON_VALUES


@st.composite
def request_body(draw: st.DrawFn, doc: dict[str, Any], schema: dict[str, Any] | None) -> str | None:
    """A JSON body from ``schema`` most of the time, else one that breaks it."""
    if schema is None:
        return draw(st.sampled_from([None] * 6 + ["{", "[]"]))
    target = resolve(doc, schema)
    props = list(target.get("properties", {}))
    value = draw(values(doc, schema))
    how = draw(st.sampled_from(["valid"] * 4 + ["missing", "wrong", "huge", "huge", "garbage",
                                                 "none"]))
    if how == "missing" and value:
        value.pop(draw(st.sampled_from(sorted(value))))
    elif how == "wrong" and props:
        value[draw(st.sampled_from(props))] = draw(WRONG)
    elif how == "huge" and props:
        strings = [p for p in props if resolve(doc, target["properties"][p]).get("type") ==
                   "string"] or props
        value[draw(st.sampled_from(strings))] = draw(HUGE)
    elif how == "garbage":
        return draw(st.sampled_from(["", "{", "null", "[1, 2]", '"text"', "42"]) |
                    JSON_VALUES.map(json.dumps))
    elif how == "none":
        return None
    return json.dumps(value)


def path_value(env: Env) -> st.SearchStrategy[str]:
    seeded = st.sampled_from(sorted(env.seeded.values()))
    return st.one_of(seeded, seeded, seeded,
                     st.text(alphabet=string.ascii_letters + string.digits + "-_.~", min_size=1,
                             max_size=30),
                     st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                             min_size=1, max_size=10),
                     st.just("a" * 3000))


@st.composite
def query_params(draw: st.DrawFn, params: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in params:
        if p["in"] != "query" or not draw(st.booleans()):
            continue
        if p["schema"].get("type") == "integer":
            raw = draw(st.integers(-5, 5000).map(str) | st.sampled_from(["", "ten", "1.5",
                                                                          "9" * 30]))
        elif p["name"] == "state":
            raw = draw(st.sampled_from([s.value for s in JobState] + ["bogus", "pending"]))
        else:
            raw = draw(st.text(max_size=20) | st.just("9" * 40))
        out[p["name"]] = raw
    if draw(st.integers(0, 9)) == 0:
        out[draw(HEADER_TEXT.filter(bool))] = draw(HEADER_TEXT)
    return out


@st.composite
def request_headers(draw: st.DrawFn, env: Env) -> dict[str, str]:
    hdrs = {"Content-Type": "application/json"}
    who = draw(st.sampled_from(["admin"] * 6 + ["bearer", "user", "none", "wrong"]))
    if who == "admin":
        hdrs["X-API-Key"] = env.admin_key
    elif who == "bearer":
        hdrs["Authorization"] = f"Bearer {env.admin_key}"
    elif who == "user":
        hdrs["X-API-Key"] = env.user_key
    elif who == "wrong":
        hdrs["X-API-Key"] = draw(HEADER_TEXT)
    tenant = draw(st.sampled_from(["mine"] * 3 + ["none", "other", "random"]))
    if tenant == "mine":
        hdrs["X-Tenant-ID"] = env.tenant
    elif tenant == "other":
        hdrs["X-Tenant-ID"] = "globex"
    elif tenant == "random":
        hdrs["X-Tenant-ID"] = draw(HEADER_TEXT)
    if draw(st.integers(0, 4)) == 0:
        hdrs["X-Cordum-Tenant"] = draw(st.sampled_from([env.tenant, "globex"]))
    if draw(st.integers(0, 4)) == 0:
        hdrs["Idempotency-Key"] = draw(st.uuids().map(str) | HEADER_TEXT | st.just("k" * 600))
    if draw(st.integers(0, 6)) == 0:
        hdrs["X-" + draw(st.text(string.ascii_letters, min_size=1, max_size=8))] = \
            draw(HEADER_TEXT)
    return hdrs


def _answer_type(op: openapi_operation.Operation, status: int) -> Any:
    return op.ok if status == op.ok_status else op.error_type(status)


def problems(op: openapi_operation.Operation, resp: dict[str, Any]) -> list[str]:
    """How an answer differs from what the document says of ``op``; [] when it agrees."""
    status, body = resp["statusCode"], resp.get("body") or ""
    found = []
    if status >= 500:
        found.append(f"status {status}")
    if status not in op.statuses() | ANYWHERE:
        found.append(f"status {status} is not documented")
    media = op.ok_media if status == op.ok_status else openapi_operation.JSON
    tp = _answer_type(op, status)
    content_type = header(resp, "Content-Type") or ""
    if tp is None:
        if body:
            found.append(f"{status} has a body")
        return found
    if not content_type.startswith(media):
        found.append(f"Content-Type {content_type!r}, documented {media}")
        return found
    if media != openapi_operation.JSON:
        return found
    try:
        adapter = TypeAdapter(tp)
        parsed = adapter.validate_json(body, strict=True) if tp is not dict else json.loads(body)
    except (ValidationError, ValueError) as exc:
        found.append(f"body does not match {getattr(tp, '__name__', tp)}: {exc}")
        return found
    if isinstance(parsed, schemas.Error) and parsed.status != status:
        found.append(f"Error.status {parsed.status} in a {status} answer")
    if status == 429 and not (header(resp, "Retry-After") or "").isdigit():
        found.append("429 without an integer Retry-After")
    return found


def _ids_created(op: openapi_operation.Operation, resp: dict[str, Any]) -> list[str]:
    if resp["statusCode"] != 200 or op.operation_id not in ("submitJob", "retryDLQEntry"):
        return []
    try:
        return [str(json.loads(resp["body"])["job_id"])]
    except (ValueError, KeyError, TypeError):
        return []


@pytest.mark.parametrize("op_id", [op.operation_id for op in openapi.OPERATIONS])
def test_gateway_answers_as_documented(live, op_id):
    doc = served_document()
    found = [(m, p, o) for m, p, o in operations(doc) if o["operationId"] == op_id]
    assert len(found) == 1, op_id
    method, path, spec = found[0]
    op = openapi.operation(op_id)
    params = [resolve(doc, p) for p in spec.get("parameters", [])]
    body_schema = spec.get("requestBody", {}).get("content", {}).get(
        openapi_operation.JSON, {}).get("schema")
    seen: set[int] = set()

    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one_request(data: st.DataObject) -> None:
        concrete = path
        for p in params:
            if p["in"] == "path":
                concrete = concrete.replace("{" + p["name"] + "}", data.draw(path_value(live)))
        ev = event(method, concrete, content_type=None,
                   headers=data.draw(request_headers(live)),
                   query=data.draw(query_params(params)),
                   body=data.draw(request_body(doc, body_schema)))
        resp = gateway.handle(ev, None)
        live.job_ids.update(_ids_created(op, resp))
        seen.add(resp["statusCode"])
        found = problems(op, resp)
        assert not found, (f"{method.upper()} {concrete[:80]} -> {resp['statusCode']} "
                           f"{(resp.get('body') or '')[:300]}: {found}")

    one_request()
    # The run reached the operation, not only the auth layer.
    if op_id not in PUBLIC:
        assert seen - {401}, seen


def _call(env: Env, op_id: str, body: str | None, job_id: str = "") -> dict[str, Any]:
    op = openapi.operation(op_id)
    path = re.sub(r"\{[^}]+\}", job_id or env.seeded["gated"], op.path)
    resp = gateway.handle(event(op.method, path, body, key=env.admin_key, tenant=env.tenant),
                          None)
    env.job_ids.update(_ids_created(op, resp))
    return resp


HUGE_PROMPT = json.dumps({"prompt": "x" * 1_100_000})


@pytest.mark.parametrize(("op_id", "body", "status"), [
    ("submitJob", HUGE_PROMPT, 413),
    ("submitJob", json.dumps({"prompt": "x" * 50_001}), 400),
    ("submitJob", "{", 400),
    ("submitJob", "[]", 400),
    ("submitJob", None, 400),
    ("submitJob", json.dumps({"prompt": 5}), 400),
    ("approveJob", "{", 400),
    ("approveJob", "{}", 400),
    ("rejectJob", json.dumps({"reason": ["not", "text"]}), 400),
    ("rejectJob", None, 400),
])
def test_malformed_and_oversized_bodies_answer_as_documented(live, op_id, body, status):
    resp = _call(live, op_id, body)
    assert problems(openapi.operation(op_id), resp) == [], resp["body"][:300]
    assert resp["statusCode"] == status, resp["body"][:300]


def test_an_oversized_approval_reason_is_cut_not_refused(live):
    # A reason is cut to 512 bytes (ApprovalDecisionRequest), and approve has no body
    # limit of its own: a 1.1 MB reason goes on to the approval checks as a short one
    # does. The seeded job was gated without a job hash, so those checks answer the
    # documented 409 approval_stale_request, whatever the reason's length.
    stale = {"error": "approval job hash unavailable", "code": "approval_stale_request",
             "status": 409}
    for reason in ("x" * 1_100_000, "x"):
        resp = _call(live, "approveJob", json.dumps({"reason": reason}))
        assert problems(openapi.operation("approveJob"), resp) == [], resp["body"][:300]
        assert (resp["statusCode"], json.loads(resp["body"])) == (409, stale)


def test_rate_limited_answer_is_documented(live, monkeypatch):
    monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0.01")
    monkeypatch.setenv("CORDUM_RATE_LIMIT_BURST", "1")
    first = _call(live, "submitJob", json.dumps({"prompt": "one"}))
    second = _call(live, "submitJob", json.dumps({"prompt": "two"}))
    assert (first["statusCode"], second["statusCode"]) == (200, 429)
    assert problems(openapi.operation("submitJob"), second) == []


def test_problems_catches_what_the_document_forbids():
    get_job = openapi.operation("getJob")

    def answer(status: int, body: Any, content_type: str = "application/json") -> dict:
        return {"statusCode": status, "headers": {"Content-Type": content_type},
                "body": body if isinstance(body, str) else json.dumps(body)}

    assert problems(get_job, answer(200, {"id": "j", "updated_at": "2026-05-09T12:00:00.1Z",
                                          "labels": {}, "extra": 1})) == []
    assert problems(get_job, answer(200, {"updated_at": 1778328000000000}))
    assert problems(get_job, answer(200, {"labels": None}))
    assert problems(get_job, answer(200, {"priority": "interactive"}))
    assert problems(get_job, answer(404, {"error": "job not found", "status": 404})) == []
    assert problems(get_job, answer(404, {"error": "job not found", "status": 400}))
    assert problems(get_job, answer(409, {"error": "x", "status": 409}))
    assert problems(get_job, answer(503, {"error": "x", "status": 503})) == ["status 503"]
    assert problems(get_job, answer(200, "ok", "text/plain"))
    assert problems(get_job, answer(429, {"error": "rate limited", "status": 429}))
    assert problems(openapi.operation("deleteDLQEntry"), answer(204, "")) == []
    assert problems(openapi.operation("listDLQ"), answer(200, {"items": []}))
    assert problems(openapi.operation("healthCheck"),
                    answer(200, {"status": "healthy", "redis": "ok", "nats": "ok"})) == []


def test_types_in_the_document_are_the_models_the_run_validates_with():
    # Each documented 2xx schema is the model (or list of it) the run validates against.
    doc = openapi.document()
    for op in openapi.OPERATIONS:
        answer = doc["paths"][op.path][op.method]["responses"][str(op.ok_status)]
        if op.ok is None or op.ok in (dict, str):
            continue
        schema = answer["content"][openapi_operation.JSON]["schema"]
        if typing.get_origin(op.ok) is list:
            assert schema["items"] == openapi.ref(typing.get_args(op.ok)[0].__name__)
        else:
            assert schema == openapi.ref(op.ok.__name__)


def test_the_streams_paths_are_documented_as_cordum_streams():
    doc = openapi.document()
    for path, op_id in (("/api/v1/stream", "streamEvents"),
                        ("/api/v1/jobs/{id}/stream", "streamJobEvents")):
        op = doc["paths"][path]["get"]
        # Then each says it is served by cordum-stream, as SSE or a WebSocket
        assert op["operationId"] == op_id and op["tags"] == ["Events"]
        assert "text/event-stream" in op["responses"]["200"]["content"]
        assert "cordum-stream" in op["description"]
        assert "cordum-api-key" in op["description"]
    filters = {p.get("name") for p in doc["paths"]["/api/v1/stream"]["get"]["parameters"]}
    assert {"types", "topic", "job_id", "run_id", "since"} <= filters
