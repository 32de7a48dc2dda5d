"""The schema and topic registries through the gateway, on the real Redis: register,
list, read and delete schemas in Cordum's shapes and codes; a schema that is no usable
JSON Schema refused naming its problem; the size and count limits; topics naming an
input schema; a schema in use kept; every write audited."""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.gateway.core.input_schemas import InputSchemaViolation, check_submit
from cordum.gateway.schema_registry import service as registry_service
from cordum.store import schema_registry as keys
from cordum.store.audit import parse_entry, stream_key
from tests import helpers
from tests.conftest import REDIS_URL

ADMIN = "schemas-admin-key"
VIEWER = "schemas-viewer-key"
WRITER = "schemas-writer-key"
ORDER = {"type": "object", "required": ["amount"],
         "properties": {"amount": {"type": "number", "minimum": 0},
                        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unique = unique
        self.tenant = f"sr-{unique}"
        helpers.use_gateway(monkeypatch, [
            {"key": ADMIN, "tenant": self.tenant, "role": "admin", "principal_id": "ops"},
            {"key": VIEWER, "tenant": self.tenant, "role": "viewer", "principal_id": "v"},
            {"key": WRITER, "tenant": self.tenant, "role": "schemas.write",
             "principal_id": "w"}])

    def call(self, method: str, path: str, body=None, key: str = ADMIN, query=None):  # type: ignore[no-untyped-def]
        status, answer, _ = helpers.call(helpers.event(method, path, body, key=key,
                                                       tenant=self.tenant, query=query))
        return status, answer

    def put(self, schema_id: str, schema=ORDER, key: str = ADMIN):  # type: ignore[no-untyped-def]
        return self.call("POST", "/api/v1/schemas", {"id": schema_id, "schema": schema}, key)

    def topic(self, name: str, **fields):  # type: ignore[no-untyped-def]
        return self.call("POST", "/api/v1/topics", {"name": name, "pool": "default", **fields})

    def audit_types(self) -> list[str]:
        items = runtime.run(runtime.redis_client().xrange(stream_key(self.tenant)))
        return [parse_entry(sid, f).decoded()["type"] for sid, f in items]


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        try:
            yield a
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"*{unique}*"))


# --- schemas -----------------------------------------------------------------------------

def test_a_schema_is_registered_listed_read_and_deleted(api):
    assert api.put("order") == (204, "")
    status, got = api.call("GET", "/api/v1/schemas/order", key=VIEWER)
    assert status == 200 and got["id"] == "order" and got["schema"] == ORDER
    assert len(got["sha256"]) == 64 and got["updated_at"].endswith("Z")
    assert api.put("alpha", {"type": "string"}, key=WRITER) == (204, "")

    status, listed = api.call("GET", "/api/v1/schemas", key=VIEWER)
    assert status == 200 and listed["next_cursor"] is None
    assert [(s["id"], s["schema"]) for s in listed["schemas"]] == [
        ("alpha", {"type": "string"}), ("order", ORDER)]

    assert api.call("DELETE", "/api/v1/schemas/order") == (204, "")
    status, body = api.call("GET", "/api/v1/schemas/order")
    assert (status, body["code"]) == (404, "CONFIG_SCHEMA_NOT_FOUND")
    status, body = api.call("DELETE", "/api/v1/schemas/order")
    assert (status, body["code"]) == (404, "CONFIG_SCHEMA_NOT_FOUND")
    assert api.audit_types() == ["schema.register", "schema.register", "schema.delete"]


def test_registering_again_replaces_the_schema(api):
    api.put("order")
    assert api.put("order", {"type": "array"}) == (204, "")
    assert api.call("GET", "/api/v1/schemas/order")[1]["schema"] == {"type": "array"}
    assert [s["id"] for s in api.call("GET", "/api/v1/schemas")[1]["schemas"]] == ["order"]


def test_the_list_pages_in_id_order(api):
    for i in range(5):
        api.put(f"s{i}", {"type": "integer", "minimum": i})
    status, first = api.call("GET", "/api/v1/schemas", query={"limit": "2"})
    assert [s["id"] for s in first["schemas"]] == ["s0", "s1"] and first["next_cursor"] == "s1"
    second = api.call("GET", "/api/v1/schemas", query={"limit": "2", "cursor": "s1"})[1]
    third = api.call("GET", "/api/v1/schemas", query={"limit": "2", "cursor": "s3"})[1]
    assert [s["id"] for s in second["schemas"]] == ["s2", "s3"]
    assert [s["id"] for s in third["schemas"]] == ["s4"] and third["next_cursor"] is None
    for bad in ({"limit": "0"}, {"limit": "x"}, {"cursor": "../x"}):
        assert api.call("GET", "/api/v1/schemas", query=bad)[0] == 400


@pytest.mark.parametrize(("body", "words"), [
    ({"schema": ORDER}, "schema id required"),
    ({"id": "  ", "schema": ORDER}, "schema id required"),
    ({"id": "a/b", "schema": ORDER}, "schema id must start"),
    ({"id": "x" * 129, "schema": ORDER}, "longer than 128"),
    ({"id": 5, "schema": ORDER}, "id must be a string"),
    ({"id": "order"}, "schema required"),
    ({"id": "order", "schema": True}, "schema must be a JSON object"),
    ({"id": "order", "schema": {"type": 12}}, "schema.type: "),
    ({"id": "order", "schema": {"properties": {"x": {"$ref": "https://example.com/x"}}}},
     "schema.properties.x.$ref: 'https://example.com/x' is not inside the schema"),
    ({"id": "order", "schema": {"properties": {"x": {"pattern": "(a)\\1"}}}},
     "schema.properties.x.pattern: not supported by RE2"),
    ({"id": "order", "schema": {"$ref": "#/$defs/missing"}}, "points nowhere"),
])
def test_an_unusable_schema_is_400_naming_the_problem(api, body, words):
    status, answer = api.call("POST", "/api/v1/schemas", body)
    assert (status, answer["code"]) == (400, "CONFIG_SCHEMA_VIOLATION"), answer
    assert words in answer["error"]
    assert api.call("GET", "/api/v1/schemas")[1]["schemas"] == []


def test_a_schema_over_64_kib_is_413_and_a_body_over_256_kib_too(api):
    big = {"type": "object", "properties": {f"p{i:05d}": {"type": "string"}
                                            for i in range(3000)}}
    assert len(json.dumps(big, separators=(",", ":"))) > keys.MAX_SCHEMA_BYTES
    status, body = api.put("big", big)
    assert (status, body["code"]) == (413, "payload_too_large")
    status, body = api.call("POST", "/api/v1/schemas",
                            json.dumps({"id": "x", "schema": {}}) + " " * 300_000)
    assert status == 413
    fits = {"type": "object", "properties": {f"p{i:04d}": {"type": "string"}
                                             for i in range(2000)}}
    assert api.put("fits", fits) == (204, "")


def test_a_tenant_holds_at_most_the_stated_number_of_schemas(api, monkeypatch):
    monkeypatch.setattr(registry_service, "MAX_SCHEMAS", 3)
    for i in range(3):
        assert api.put(f"s{i}")[0] == 204
    status, body = api.put("s3")
    assert (status, body["code"], body["limit"], body["current"]) == (
        403, "tier_limit_exceeded", 3, 3)
    assert api.put("s1", {"type": "string"})[0] == 204  # a replacement is not one more
    api.call("DELETE", "/api/v1/schemas/s0")
    assert api.put("s3")[0] == 204


# --- topics ------------------------------------------------------------------------------

def test_a_topic_names_an_input_schema_of_the_tenant(api):
    status, body = api.topic("job.orders.create", input_schema_id="order")
    assert (status, body["code"]) == (400, "TOPIC_SCHEMA_VIOLATION")
    assert "input_schema_id order names no schema" in body["error"]
    api.put("order")

    status, made = api.topic("job.orders.create", input_schema_id="order",
                             requires=["gpu", " gpu", "a"], risk_tags=["pii"], pack_id="p1")
    assert status == 201
    assert made == {"name": "job.orders.create", "tenant_id": api.tenant, "pool": "default",
                    "input_schema_id": "order", "pack_id": "p1", "requires": ["a", "gpu"],
                    "risk_tags": ["pii"], "status": "active"}
    status, again = api.topic("job.orders.create", input_schema_id="order",
                              status="Deprecated")
    assert (status, again["status"]) == (200, "deprecated")

    status, listed = api.call("GET", "/api/v1/topics", key=VIEWER)
    assert status == 200 and listed["registry_empty"] is False
    assert listed["items"] == [{"name": "job.orders.create", "pool": "default",
                                "input_schema_id": "order", "status": "deprecated",
                                "active_worker_count": 0}]
    stored = runtime.run(keys.read_topic(runtime.redis_client(), api.tenant,
                                         "job.orders.create"))
    assert stored is not None and stored["input_schema_id"] == "order"

    assert api.call("DELETE", "/api/v1/topics/job.orders.create") == (204, "")
    status, body = api.call("DELETE", "/api/v1/topics/job.orders.create")
    assert (status, body["code"]) == (404, "TOPIC_NOT_FOUND")
    assert api.call("GET", "/api/v1/topics")[1] == {"items": [], "next_cursor": None,
                                                     "registry_empty": True}
    assert api.audit_types() == ["schema.register", "topic.create", "topic.update",
                                 "topic.delete"]


@pytest.mark.parametrize(("fields", "words"), [
    ({"name": "orders"}, "job.* pattern"),
    ({"name": "job.x.*"}, "job.* pattern"),
    ({"name": "job.x", "pool": ""}, "topic pool required"),
    ({"name": "job.x", "pool": "Bad_Pool"}, "pool name"),
    ({"name": "job.x", "pool": "default", "status": "paused"}, "invalid topic status"),
    ({"name": "job.x", "pool": "default", "requires": ["x"] * 101}, "at most 100 items"),
    ({"name": "job.x", "pool": "default", "risk_tags": ["x" * 129]}, "risk_tags[0]"),
    ({"name": "job.x", "pool": "default", "requires": "gpu"}, "list of strings"),
    ({"name": "job.x", "pool": "default", "output_schema_id": "missing"},
     "output_schema_id missing names no schema"),
])
def test_a_bad_topic_is_400_naming_the_field(api, fields, words):
    status, body = api.call("POST", "/api/v1/topics", fields)
    assert (status, body["code"]) == (400, "TOPIC_SCHEMA_VIOLATION"), body
    assert words in body["error"]


def test_a_disabled_topic_needs_no_pool(api):
    status, body = api.call("POST", "/api/v1/topics", {"name": "job.off", "status": "disabled"})
    assert (status, body["pool"], body["status"]) == (201, "", "disabled")


def test_a_schema_a_topic_names_is_not_deleted(api):
    api.put("order")
    api.put("receipt", {"type": "object"})
    api.topic("job.orders.create", input_schema_id="order", output_schema_id="receipt")
    api.topic("job.orders.amend", input_schema_id="order")
    status, body = api.call("DELETE", "/api/v1/schemas/order")
    assert (status, body["code"]) == (409, "SCHEMA_IN_USE")
    assert "job.orders.amend, job.orders.create" in body["error"]
    assert api.call("DELETE", "/api/v1/schemas/receipt")[0] == 409

    # Pointing the topics elsewhere, or deleting them, frees the schema.
    api.topic("job.orders.create", input_schema_id="receipt")
    assert api.call("DELETE", "/api/v1/schemas/order")[0] == 409
    api.call("DELETE", "/api/v1/topics/job.orders.amend")
    assert api.call("DELETE", "/api/v1/schemas/order") == (204, "")
    assert api.call("DELETE", "/api/v1/schemas/receipt")[0] == 409


def test_a_submit_is_checked_against_its_topics_input_schema(api):
    api.put("order")
    api.topic("job.orders.create", input_schema_id="order")
    redis = runtime.redis_client()

    def check(body: dict) -> object:
        return runtime.run(check_submit(redis, api.tenant, body))

    good = {"prompt": "p", "topic": "job.orders.create", "context": {"amount": 3}}
    assert check(good)["input_schema_id"] == "order"
    with pytest.raises(InputSchemaViolation) as refused:
        check({**good, "context": {"amount": "3", "currency": "eur"}})
    assert refused.value.path == "$.context.amount"
    assert refused.value.body()["violations"] == [
        {"path": "$.context.amount", "message": "'3' is not of type 'number'"},
        {"path": "$.context.currency", "message": "'eur' does not match '^[A-Z]{3}$'"}]
    with pytest.raises(InputSchemaViolation) as refused:
        check({"prompt": "p", "topic": "job.orders.create"})  # no context: the payload
    assert refused.value.path == "$" and "'amount' is a required property" in \
        refused.value.problem
    assert check({"prompt": "p", "topic": "job.unregistered"}) is None


def test_a_write_that_meets_a_concurrent_change_runs_again_then_gives_up(api, monkeypatch):
    """The topic write reads, then stamps its record: a change of the topic's key in
    between fails the EXEC, and the write runs again (409 ``registry_busy`` after 3)."""
    import redis as sync_redis

    from cordum.gateway.schema_registry import topics

    other = sync_redis.Redis.from_url(REDIS_URL)
    key = keys.topic_key(api.tenant, "job.race")
    real_now = topics.now_text
    meddle = [2]

    def racing_now() -> str:
        if meddle[0]:
            meddle[0] -= 1
            other.set(key, json.dumps({"name": "job.race", "pool": "theirs"}))
        return real_now()

    monkeypatch.setattr(topics, "now_text", racing_now)
    status, body = api.topic("job.race")
    assert (status, body["pool"]) == (200, "default")  # third try: replaces theirs

    meddle[0] = 10
    status, body = api.topic("job.race")
    assert (status, body["code"], body["retryable"]) == (409, "registry_busy", True)
    other.close()
