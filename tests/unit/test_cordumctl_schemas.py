"""cordumctl's schemas commands against a stub API: list (every page), get, put from a
file or stdin, delete (a schema in use exits 5), and the topic registrations."""

from __future__ import annotations

import json
from pathlib import Path

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

SCHEMAS = "/api/v1/schemas"
TOPICS = "/api/v1/topics"
ORDER = {"type": "object", "required": ["amount"]}


def record(schema_id: str, schema: dict | None = None) -> dict:
    return {"id": schema_id, "schema": schema or ORDER, "sha256": "ab" * 32,
            "updated_at": "2026-11-27T07:00:00Z"}


def two_pages() -> StubApi:
    return StubApi().on("GET", SCHEMAS,
                        reply(200, {"schemas": [record("a")], "next_cursor": "a"}),
                        reply(200, {"schemas": [record("b", {"type": "array"})],
                                    "next_cursor": None}))


def test_list_follows_every_page_and_prints_a_table() -> None:
    api = two_pages()
    out = run_cli(api, "-o", "table", "schemas", "list").out
    assert [r.url.params.get("cursor") for r in api.sent("GET", SCHEMAS)] == [None, "a"]
    header, first, second = out.splitlines()[:3]
    assert header.split() == ["ID", "UPDATED", "SHA256", "TYPE"]
    assert first.split() == ["a", "2026-11-27T07:00:00Z", "abababababab", "object"]
    assert second.split()[-1] == "array"
    assert [r["id"] for r in run_cli(two_pages(), "schemas", "list").json()] == ["a", "b"]


def test_an_empty_list_says_so() -> None:
    api = StubApi().on("GET", SCHEMAS, reply(200, {"schemas": [], "next_cursor": None}))
    assert "no schemas" in run_cli(api, "-o", "table", "schemas", "list").out


def test_get_prints_the_record_as_json_even_in_table_mode() -> None:
    api = StubApi().on("GET", f"{SCHEMAS}/order", reply(200, record("order")))
    assert run_cli(api, "-o", "table", "schemas", "get", "order").json()["schema"] == ORDER
    missing = StubApi().on("GET", f"{SCHEMAS}/nope",
                           error(404, "schema not found", "CONFIG_SCHEMA_NOT_FOUND"))
    result = run_cli(missing, "schemas", "get", "nope")
    assert result.code == ExitCode.NOT_FOUND and "schema not found" in result.err


def test_put_sends_the_file_as_the_schema(tmp_path: Path) -> None:
    api = StubApi().on("POST", SCHEMAS, reply(204))
    (tmp_path / "order.json").write_text(json.dumps(ORDER))
    (tmp_path / "order.yaml").write_text("type: object\nrequired: [amount]\n")
    for name in ("order.json", "order.yaml"):
        out = run_cli(api, "-o", "table", "schemas", "put", "order",
                      str(tmp_path / name)).out
        assert "registered order" in out
        assert api.body("POST", SCHEMAS) == {"id": "order", "schema": ORDER}


def test_put_refuses_what_is_no_schema_before_sending(tmp_path: Path) -> None:
    api = StubApi()
    (tmp_path / "list.json").write_text("[1, 2]")
    assert run_cli(api, "schemas", "put", "x", str(tmp_path / "list.json")).code == \
        ExitCode.USAGE
    assert run_cli(api, "schemas", "put", "x", str(tmp_path / "missing.json")).code == \
        ExitCode.USAGE
    assert api.requests == []


def test_put_refused_by_the_api_exits_invalid_with_its_message(tmp_path: Path) -> None:
    api = StubApi().on("POST", SCHEMAS, error(400, "schema.type: 12 is not valid",
                                              "CONFIG_SCHEMA_VIOLATION"))
    (tmp_path / "s.json").write_text('{"type": 12}')
    result = run_cli(api, "schemas", "put", "x", str(tmp_path / "s.json"))
    assert result.code == ExitCode.INVALID and "schema.type: 12" in result.err


def test_delete_and_a_schema_in_use() -> None:
    api = StubApi().on("DELETE", f"{SCHEMAS}/old", reply(204))
    assert run_cli(api, "schemas", "delete", "old").json() == {"id": "old", "deleted": True}
    busy = StubApi().on("DELETE", f"{SCHEMAS}/order", error(
        409, "schema order is in use by topic(s) job.orders", "SCHEMA_IN_USE"))
    result = run_cli(busy, "schemas", "delete", "order")
    assert result.code == ExitCode.CONFLICT and "job.orders" in result.err


def test_topics_list_prints_each_registration() -> None:
    api = StubApi().on("GET", TOPICS, reply(200, {"items": [
        {"name": "job.orders", "status": "active", "pool": "default",
         "input_schema_id": "order", "active_worker_count": 2}],
        "next_cursor": None, "registry_empty": False}))
    header, row = run_cli(api, "-o", "table", "schemas", "topics", "list").out.splitlines()[:2]
    assert header.split() == ["TOPIC", "STATUS", "POOL", "INPUT", "SCHEMA", "OUTPUT", "SCHEMA",
                              "WORKERS"]
    assert row.split() == ["job.orders", "active", "default", "order", "-", "2"]


def test_topics_set_sends_what_is_given_and_delete_names_the_topic() -> None:
    made = {"name": "job.orders", "tenant_id": "default", "pool": "default",
            "input_schema_id": "order", "requires": ["gpu"], "status": "active"}
    api = StubApi().on("POST", TOPICS, reply(201, made)) \
        .on("DELETE", f"{TOPICS}/job.orders", reply(204))
    out = run_cli(api, "-o", "table", "schemas", "topics", "set", "job.orders",
                  "--input-schema", "order", "--pool", "default", "--requires", "gpu",
                  "--risk-tag", "pii", "--risk-tag", "money").out
    assert "set job.orders" in out
    assert api.body("POST", TOPICS) == {"name": "job.orders", "input_schema_id": "order",
                                        "pool": "default", "requires": ["gpu"],
                                        "risk_tags": ["pii", "money"]}
    assert run_cli(api, "schemas", "topics", "delete", "job.orders").json() == {
        "name": "job.orders", "deleted": True}


def test_topics_set_with_an_unknown_schema_exits_invalid() -> None:
    api = StubApi().on("POST", TOPICS, error(
        400, "input_schema_id nope names no schema of this tenant", "TOPIC_SCHEMA_VIOLATION"))
    result = run_cli(api, "schemas", "topics", "set", "job.x", "--input-schema", "nope",
                     "--pool", "default")
    assert result.code == ExitCode.INVALID and "names no schema" in result.err
