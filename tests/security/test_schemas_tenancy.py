"""A tenant's schemas and topics are its own, only its admins change them, and a hostile
schema costs bounded CPU. Each test is an attempt that must fail: another tenant's
admin reading, deleting, overwriting or naming tenant A's schema or topic; a viewer or
user key of A writing; a schema built to spin the gateway (deep nesting, a huge or
backtracking pattern, many properties, references that branch).

Keys: ``victim`` (admin, A), ``viewer`` and ``user`` (A), ``intruder`` (admin, B),
``root`` (admin, ``*``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from cordum import runtime
from cordum.gateway.core.input_schemas import InputSchemaViolation, check_submit
from cordum.store import schema_registry as keys
from tests import helpers
from tests.security.conftest import configure

VICTIM = "schemas-victim-0123456789"
VIEWER = "schemas-viewer-0123456789"
USER = "schemas-user-0123456789"
INTRUDER = "schemas-intruder-0123456789"
ROOT = "schemas-root-0123456789"
ORDER = {"type": "object", "properties": {"amount": {"type": "number"}}}
FAST_S = 10.0
"""Generous bound for a bounded check (a security bound, not a benchmark): a check the
budget stops spends about a second of CPU, a machine under load may take a few; an
unbounded one (exponential backtracking, 2**30 reference walks) would take hours."""


class Tenants:
    def __init__(self, unique: str) -> None:
        self.a, self.b = f"schemas-victim-{unique}", f"schemas-intruder-{unique}"

    def call(self, method: str, path: str, key: str, body: Any = None, *,
             tenant: str | None = None) -> tuple[int, Any]:
        status, answer, _ = helpers.call(helpers.event(method, path, body, key=key,
                                                       tenant=tenant))
        return status, answer

    def put(self, key: str, schema_id: str, schema: Any = ORDER,
            tenant: str | None = None) -> tuple[int, Any]:
        return self.call("POST", "/api/v1/schemas", key, {"id": schema_id, "schema": schema},
                         tenant=tenant)


@pytest.fixture
def t(monkeypatch, unique):
    tenants = Tenants(unique)
    configure(monkeypatch, [
        {"key": VICTIM, "tenant": tenants.a, "role": "admin", "principal_id": "victim"},
        {"key": VIEWER, "tenant": tenants.a, "role": "viewer", "principal_id": "viewer"},
        {"key": USER, "tenant": tenants.a, "role": "user", "principal_id": "user"},
        {"key": INTRUDER, "tenant": tenants.b, "role": "admin", "principal_id": "intruder"},
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    with helpers.gateway_process():
        assert tenants.put(VICTIM, "order")[0] == 204
        status, _ = tenants.call("POST", "/api/v1/topics", VICTIM,
                                 {"name": "job.orders", "pool": "default",
                                  "input_schema_id": "order"})
        assert status == 201
        try:
            yield tenants
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"*{unique}*"))


# --------------------------------------------------------------------------- tenancy


def test_another_tenants_schema_answers_as_a_missing_one(t):
    """Exploit: an admin of B read, listed or deleted A's schema by guessing its id."""
    missing = t.call("GET", "/api/v1/schemas/never-registered", INTRUDER)
    assert missing[0] == 404
    assert t.call("GET", "/api/v1/schemas/order", INTRUDER) == missing
    assert t.call("DELETE", "/api/v1/schemas/order", INTRUDER) == \
        t.call("DELETE", "/api/v1/schemas/never-registered", INTRUDER)
    assert t.call("GET", "/api/v1/schemas", INTRUDER)[1]["schemas"] == []
    # A header naming A is refused for B's key; A's schema is intact.
    assert t.call("GET", "/api/v1/schemas/order", INTRUDER, tenant=t.a)[0] == 403
    assert t.call("GET", "/api/v1/schemas/order", VICTIM)[1]["schema"] == ORDER


def test_another_tenant_registering_the_same_id_does_not_touch_a(t):
    """Exploit: B registered a schema under A's id to loosen A's submits."""
    assert t.put(INTRUDER, "order", {"type": "object"})[0] == 204
    assert t.call("GET", "/api/v1/schemas/order", VICTIM)[1]["schema"] == ORDER
    assert t.call("GET", "/api/v1/schemas/order", INTRUDER)[1]["schema"] == {"type": "object"}


def test_another_tenants_topic_answers_as_a_missing_one(t):
    """Exploit: B listed A's topics, deleted A's topic (freeing A's submits of their
    schema) or pointed its own topic at A's schema."""
    assert t.call("GET", "/api/v1/topics", INTRUDER)[1] == {
        "items": [], "next_cursor": None, "registry_empty": True}
    assert t.call("DELETE", "/api/v1/topics/job.orders", INTRUDER) == \
        t.call("DELETE", "/api/v1/topics/job.never", INTRUDER)
    status, body = t.call("POST", "/api/v1/topics", INTRUDER,
                          {"name": "job.mine", "pool": "default", "input_schema_id": "order"})
    assert (status, body["code"]) == (400, "TOPIC_SCHEMA_VIOLATION")
    # A's topic still holds A's submits to A's schema.
    with pytest.raises(InputSchemaViolation):
        runtime.run(check_submit(runtime.redis_client(), t.a,
                                 {"topic": "job.orders", "context": {"amount": "x"}}))
    assert runtime.run(check_submit(runtime.redis_client(), t.b,
                                    {"topic": "job.orders", "context": {"amount": "x"}})) is None


def test_a_key_for_every_tenant_acts_only_in_the_tenant_it_names(t):
    assert t.call("GET", "/api/v1/schemas/order", ROOT, tenant=t.a)[1]["schema"] == ORDER
    assert t.call("GET", "/api/v1/schemas/order", ROOT, tenant=t.b)[0] == 404
    # Naming none, it acts in tenant default, as on every route: never in A.
    assert t.call("GET", "/api/v1/schemas/order", ROOT)[0] == 404


def test_a_tenant_holding_a_colon_never_reaches_another_tenants_keys():
    """Exploit: tenant ``a:b`` with id ``c`` landed on tenant ``a``'s ``b:c``."""
    assert keys.schema_key("a:b", "c") != keys.schema_key("a", "b:c")
    assert keys.topic_key("a:b", "job.c") != keys.topic_key("a", "b:job.c")
    assert keys.schema_key("a%3Ab", "c") != keys.schema_key("a:b", "c")


@pytest.mark.parametrize("key", [VIEWER, USER])
def test_only_an_admin_writes(t, key):
    """Exploit: a read-only or submitting key changed what A's submits are checked
    against."""
    attempts = [
        ("POST", "/api/v1/schemas", {"id": "order", "schema": {}}),
        ("POST", "/api/v1/schemas", {"id": "new", "schema": {}}),
        ("DELETE", "/api/v1/schemas/order", None),
        ("POST", "/api/v1/topics", {"name": "job.orders", "pool": "default"}),
        ("DELETE", "/api/v1/topics/job.orders", None),
    ]
    for method, path, body in attempts:
        status, answer = t.call(method, path, key, body)
        assert (status, answer["code"]) == (403, "forbidden"), (method, path)
    assert t.call("GET", "/api/v1/schemas/order", key)[1]["schema"] == ORDER
    [topic] = t.call("GET", "/api/v1/topics", key)[1]["items"]
    assert topic["input_schema_id"] == "order"


# --------------------------------------------------------------------------- cost


def timed(call: Any) -> tuple[float, Any]:
    began = time.monotonic()
    answer = call()
    return time.monotonic() - began, answer


def test_a_deeply_nested_schema_is_refused_before_it_is_parsed(t):
    """Exploit: a schema nested thousands of levels deep overflowed the JSON decoder
    and the schema compiler."""
    deep = '{"id": "deep", "schema": ' + '{"not": ' * 5000 + "{}" + "}" * 5001
    took, (status, body) = timed(lambda: t.call("POST", "/api/v1/schemas", VICTIM, deep))
    assert status == 400 and "nested too deeply" in body["error"] and took < FAST_S


def test_a_huge_pattern_is_refused_or_checked_in_bounded_time(t):
    """Exploit: a schema whose pattern is tens of kilobytes of alternations."""
    pattern = "^(" + "|".join(f"a{i}b" for i in range(6000)) + ")$"
    took, (status, body) = timed(lambda: t.put(VICTIM, "pattern", {
        "type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}))
    assert took < FAST_S
    assert status in (204, 400, 413), body
    if status == 204:
        took, _ = timed(lambda: check_in_a(t, "pattern", {"s": "a" * 50_000}))
        assert took < FAST_S


def test_a_backtracking_pattern_is_matched_in_linear_time(t):
    """Exploit: ``^(a+)+$`` against 'a'*40+'b' on a backtracking engine held the gateway."""
    assert t.put(VICTIM, "evil", {"properties": {"s": {"pattern": "^(a+)+$"}}})[0] == 204
    took, error = timed(lambda: check_in_a(t, "evil", {"s": "a" * 40 + "b"}))
    assert took < FAST_S and "does not match" in str(error)


def test_many_properties_are_bounded_by_the_size_limit(t):
    """Exploit: a schema of hundreds of thousands of properties, checked on every submit."""
    many = {"type": "object", "properties": {f"p{i}": {"type": "integer"}
                                             for i in range(20_000)}}
    status, body = t.put(VICTIM, "many", many)
    assert (status, body["code"]) == (413, "payload_too_large")
    fits = {"type": "object", "properties": {f"p{i}": {"type": "integer"}
                                             for i in range(2_000)}}
    took, (status, _) = timed(lambda: t.put(VICTIM, "fits", fits))
    assert status == 204 and took < FAST_S
    took, error = timed(lambda: check_in_a(t, "fits", {f"p{i}": "x" for i in range(5000)}))
    assert took < FAST_S and error is not None and len(error.violations) <= 10


def test_references_that_branch_stop_at_the_check_budget(t):
    """Exploit: 30 levels of anyOf, each referencing the next twice: 2**30 walks."""
    depth = 30
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    assert t.put(VICTIM, "branching", {"$defs": defs, "$ref": "#/$defs/d0"})[0] == 204
    took, error = timed(lambda: check_in_a(t, "branching", 1))
    assert took < FAST_S and "schema check stopped" in error.problem


def check_in_a(t: Tenants, schema_id: str, context: Any) -> InputSchemaViolation | None:
    """The submit check of a topic of A whose input schema is ``schema_id``."""
    name = f"job.cost.{schema_id}"
    status, body = t.call("POST", "/api/v1/topics", VICTIM,
                          {"name": name, "pool": "default", "input_schema_id": schema_id})
    assert status in (200, 201), body
    try:
        runtime.run(check_submit(runtime.redis_client(), t.a,
                                 {"topic": name, "context": context}))
    except InputSchemaViolation as exc:
        return exc
    return None


def test_the_size_limit_counts_the_schema_not_the_whitespace_around_it(t):
    padded = json.dumps({"id": "padded", "schema": ORDER}, indent=40)
    assert t.call("POST", "/api/v1/schemas", VICTIM, padded)[0] == 204
