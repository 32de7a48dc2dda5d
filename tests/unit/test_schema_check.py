"""The input check a submit runs against its topic's schema: the JSON path and message
of each violation, their order and bound, what value a submit is checked on, and the
cache of compiled validators."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cordum.gateway.core import input_schemas
from cordum.gateway.core.input_schemas import (
    InputSchemaViolation,
    Violation,
    check_input,
    json_path,
    submit_value,
)
from cordum.store.schema_registry import canonical, schema_digest

ORDER = {"type": "object", "required": ["amount"],
         "properties": {"amount": {"type": "number"},
                        "items": {"type": "array", "items": {"type": "integer"}},
                        "meta": {"type": "object",
                                 "properties": {"a b": {"type": "string"},
                                                "it's": {"type": "string"}}}}}


def refused(schema: dict[str, Any], value: Any, **kw: Any) -> InputSchemaViolation:
    with pytest.raises(InputSchemaViolation) as caught:
        check_input(schema, value, **kw)
    return caught.value


def test_a_value_that_satisfies_the_schema_passes() -> None:
    check_input(ORDER, {"amount": 1.5, "items": [1, 2], "meta": {"a b": "x"}})


@pytest.mark.parametrize(("value", "path", "words"), [
    ({"amount": "3"}, "$.amount", "'3' is not of type 'number'"),
    ({"amount": 1, "items": [1, "two"]}, "$.items[1]", "'two' is not of type 'integer'"),
    ({"amount": 1, "meta": {"a b": 5}}, "$.meta['a b']", "5 is not of type 'string'"),
    ({"amount": 1, "meta": {"it's": 5}}, "$.meta['it\\'s']", "not of type"),
    ({}, "$", "'amount' is a required property"),
    ([], "$", "[] is not of type 'object'"),
])
def test_the_error_names_the_path_and_the_problem(value: Any, path: str, words: str) -> None:
    error = refused(ORDER, value)
    assert error.path == path and words in error.problem
    assert error.code == "schema_validation_failed" and error.status == 400
    assert error.message == f"input does not match the schema: {path}: {error.problem}"


def test_paths_start_at_the_root_given_and_the_id_is_named() -> None:
    error = refused(ORDER, {"amount": "x"}, root="$.context", schema_id="order")
    assert error.path == "$.context.amount"
    assert error.message.startswith("input does not match schema order: $.context.amount: ")
    assert error.body() == {"error": error.message, "code": "schema_validation_failed",
                            "status": 400, "violations": [{
                                "path": "$.context.amount",
                                "message": "'x' is not of type 'number'"}]}


def test_violations_come_in_path_order_and_are_bounded() -> None:
    schema = {"type": "object", "properties": {f"p{i:02d}": {"type": "string"}
                                               for i in range(30)}}
    error = refused(schema, {f"p{i:02d}": i for i in reversed(range(30))})
    assert len(error.violations) == input_schemas.MAX_VIOLATIONS
    paths = [v.path for v in error.violations]
    assert paths == sorted(paths) and error.path == paths[0]


def test_an_any_of_failure_is_told_by_its_most_relevant_cause() -> None:
    schema = {"properties": {"x": {"anyOf": [{"type": "object",
                                               "properties": {"n": {"type": "integer"}}},
                                              {"type": "object", "required": ["m"]}]}}}
    error = refused(schema, {"x": {"n": "one"}})
    assert error.violations == [Violation("$.x.n", "'one' is not of type 'integer'")]
    # No branch is closer than another: the anyOf itself is named.
    assert refused(schema, {"x": 5}).violations == [
        Violation("$.x", "5 is not valid under any of the given schemas")]


def test_a_check_that_would_cost_too_much_stops_with_a_violation() -> None:
    depth = 30
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    error = refused({"$defs": defs, "$ref": "#/$defs/d0"}, 1, root="$.context")
    assert error.path == "$.context" and "schema check stopped" in error.problem


def test_a_schema_the_registry_would_refuse_is_a_violation_not_a_crash() -> None:
    error = refused({"properties": {"x": {"$ref": "http://10.0.0.1/x.json"}}}, {"x": 1})
    assert error.path == "$" and "invalid schema: properties.x.$ref" in error.problem


def test_long_paths_and_messages_are_cut() -> None:
    key = "k" * 1000
    error = refused({"properties": {key: {"type": "integer"}}}, {key: "v" * 10_000})
    assert len(error.path) <= input_schemas.MAX_PATH_CHARS + 3
    assert len(error.problem) <= 303


def test_json_path_quotes_what_is_no_identifier() -> None:
    assert json_path("$", ["a", 0, "b-c", "_d1", "x\\y"]) == "$.a[0]['b-c']._d1['x\\\\y']"


def test_a_submit_is_checked_on_its_context_else_on_its_payload() -> None:
    body = {"prompt": "p", "topic": "job.x", "context": {"amount": 1}, "priority": "batch"}
    assert submit_value(body, "acme") == ({"amount": 1}, "$.context")
    now = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)
    assert submit_value({**body, "context": None}, "acme", now) == ({
        "prompt": "p", "adapter_id": "", "priority": "batch", "topic": "job.x",
        "created_at": "2026-11-27T07:00:00Z", "tenant_id": "acme"}, "$")
    assert submit_value({"prompt": "p", "context": []}, "acme") == ([], "$.context")


def test_compiled_validators_are_cached_per_id_and_digest_and_bounded(monkeypatch) -> None:
    input_schemas.cache_clear()
    compiled: list[Any] = []
    real = input_schemas.json_schemas._compiled

    def counting(schema: Any) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(input_schemas.json_schemas, "_compiled", counting)
    monkeypatch.setattr(input_schemas, "CACHE_SIZE", 2)
    digest = schema_digest(canonical(ORDER))
    for _ in range(3):
        check_input(ORDER, {"amount": 1}, schema_id="order", digest=digest)
    assert len(compiled) == 1
    check_input(ORDER, {"amount": 1})  # no id: another entry, same digest
    check_input({"type": "object"}, {}, schema_id="other")
    assert len(compiled) == 3 and len(input_schemas._CACHE) == 2
    check_input(ORDER, {"amount": 1}, schema_id="order", digest=digest)  # evicted: again
    assert len(compiled) == 4
    input_schemas.cache_clear()
