"""Hostile bodies, paths and failures at the HTTP edge.

Whatever a caller sends, and whatever breaks inside, the gateway answers with the
JSON error body and an ``X-Request-Id``: an exception that leaves the handler becomes
a bare 502 from API Gateway, with nothing a caller can quote.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cordum.gateway.jobs.service import JobService
from tests.helpers import REQUEST_ID, call, event
from tests.security.conftest import ALICE, BOB


def answer(ev: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
    """``call``, where an exception leaving the gateway fails the test: in Lambda it
    is API Gateway's bare ``502 {"message": "Internal server error"}``."""
    try:
        return call(ev)
    except BaseException as exc:  # RecursionError included
        pytest.fail(f"{type(exc).__name__} left the gateway: a bare 502 for the caller")


def assert_error(status: int, body: Any, headers: dict[str, Any], expected: int) -> None:
    assert status == expected, body
    assert isinstance(body, dict) and body["status"] == expected, body
    assert body["error"] and body["code"], body
    assert headers.get("X-Request-Id"), headers


def nested(depth: int) -> str:
    return '{"prompt": "x", "context": {"deep": ' + "[" * depth + "]" * depth + "}}"


# --------------------------------------------------------------------------- bodies


def test_a_body_of_100000_brackets_is_a_400(gateway):
    status, body, headers = answer(event("POST", "/api/v1/jobs", "[" * 100_000, key=ALICE))
    assert_error(status, body, headers, 400)


def test_nesting_beyond_32_levels_inside_an_object_is_a_400(gateway):
    status, body, headers = answer(event("POST", "/api/v1/jobs", nested(40), key=ALICE))
    assert_error(status, body, headers, 400)
    assert "deep" in body["error"], body


def test_a_lone_surrogate_in_the_body_is_a_400(gateway):
    # Lambda hands the body over as text; an unpaired surrogate is no UTF-8 at all.
    for raw in ('{"prompt": "a\udcffb"}', '{"prompt": "a\\ud800b"}'):
        status, body, headers = answer(event("POST", "/api/v1/jobs", raw, key=ALICE))
        assert_error(status, body, headers, 400)


def test_a_base64_body_is_decoded_and_must_be_utf8(gateway):
    bad = base64.b64encode(b'{"prompt": "caf\xe9"}').decode()
    ev = event("POST", "/api/v1/jobs", bad, key=ALICE)
    ev["isBase64Encoded"] = True
    status, body, headers = answer(ev)
    assert_error(status, body, headers, 400)
    assert "UTF-8" in body["error"], body
    # The same body, valid this time, is read as the JSON it carries.
    good = base64.b64encode('{"prompt": "café"}'.encode()).decode()
    ev = event("POST", "/api/v1/jobs", good, key=ALICE)
    ev["isBase64Encoded"] = True
    status, body, _ = answer(ev)
    assert status == 200 and body["job_id"], body


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/v1/jobs/abc\ndef"),
    ("POST", "/api/v1/jobs/abc\r\nX-Injected: 1/cancel"),
    ("GET", "/api/v1/jobs/abc\x00/decisions"),
    ("DELETE", "/api/v1/dlq/abc\x7f"),
    ("POST", "/api/v1/dlq/abc\tdef/retry"),
    ("POST", "/api/v1/approvals/abc\x1b[31m/approve"),
])
def test_control_characters_in_a_path_id_are_a_400(gateway, method, path):
    body = {"reason": "ok"} if "approve" in path else None
    status, err, headers = answer(event(method, path, body, key=ALICE))
    assert_error(status, err, headers, 400)
    assert err["code"] == "invalid_request", err


# --------------------------------------------------------------------------- failures


def explode(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("redis://secret-host:6379 exploded")


def test_an_unexpected_error_is_a_500_json_with_a_request_id(gateway, monkeypatch, caplog):
    monkeypatch.setattr(JobService, "get", explode)
    status, body, headers = answer(event("GET", "/api/v1/jobs/some-job", key=BOB))
    assert_error(status, body, headers, 500)
    assert body["code"] == "internal_error", body
    assert "secret-host" not in json.dumps(body) and "RuntimeError" not in json.dumps(body)
    # The operator finds the exception in the log under the id the caller quotes.
    logged = [r for r in caplog.records if r.exc_info and REQUEST_ID in r.getMessage()]
    assert logged, [r.getMessage() for r in caplog.records]


def test_an_unexpected_error_while_submitting_is_a_500_json(gateway, monkeypatch):
    monkeypatch.setattr(JobService, "submit", explode)
    status, body, headers = answer(event("POST", "/api/v1/jobs", {"prompt": "x"}, key=ALICE))
    assert_error(status, body, headers, 500)
    assert body["code"] == "internal_error", body


def test_an_event_the_resolver_cannot_read_is_a_500_json(gateway):
    ev = event("GET", "/api/v1/jobs/x", key=ALICE)
    del ev["httpMethod"]
    status, body, headers = answer(ev)
    assert_error(status, body, headers, 500)
    assert headers["X-Request-Id"] == REQUEST_ID
