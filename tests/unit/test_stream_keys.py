"""Who opens a stream: the credential (headers or the WebSocket subprotocol), the tenant
it streams by the gateway's rules, and the recheck that cuts off a revoked key."""

from __future__ import annotations

import asyncio
import base64

import pytest

from cordum.stream.errors import Forbidden, Unauthorized
from cordum.stream.keys import (
    ApiKey,
    KeyRefreshPolicy,
    KeyRing,
    StreamAuth,
    offered_subprotocol,
    presented_keys,
    token_candidates,
)

KEYS = [ApiKey(key="key-a", tenant="acme", role="user"),
        ApiKey(key="key-admin", tenant="acme", role="admin"),
        ApiKey(key="key-any", tenant="*", role="admin")]


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def auth(headers: dict[str, str], query: dict[str, str] | None = None):
    return asyncio.run(StreamAuth.fixed(KEYS).authenticate(headers, query or {}))


def test_the_comma_form_carries_a_base64url_key():
    caller = auth({"Sec-WebSocket-Protocol": f"cordum-api-key, {b64url('key-a')}"})
    assert caller.tenant == "acme" and caller.role == "user"


def test_the_dot_form_and_standard_base64_and_a_raw_key_work_too():
    assert auth({"Sec-WebSocket-Protocol": f"cordum-api-key.{b64url('key-a')}"}).tenant == "acme"
    std = base64.b64encode(b"key-admin").decode()
    assert auth({"Sec-WebSocket-Protocol": f"Cordum-API-Key, {std}"}).admin
    assert auth({"Sec-WebSocket-Protocol": "cordum-api-key, key-a"}).tenant == "acme"


def test_a_raw_key_that_decodes_as_base64_is_still_found():
    # "abcd" is valid base64 (of bytes that are no text): the raw form is tried too.
    assert token_candidates("abcd") == ["abcd"]
    assert token_candidates(b64url("x y")) == ["x y", b64url("x y")]


def test_the_server_answers_the_identifier_as_offered_never_the_token():
    assert offered_subprotocol({"Sec-WebSocket-Protocol": "Cordum-Api-Key, abc"}) == \
        "Cordum-Api-Key"
    assert offered_subprotocol({"Sec-WebSocket-Protocol": "cordum-api-key.abc"}) is None
    assert offered_subprotocol({}) is None


def test_headers_come_before_the_subprotocol():
    headers = {"X-API-Key": "key-a", "Authorization": "Bearer key-admin",
               "Sec-WebSocket-Protocol": f"cordum-api-key, {b64url('key-any')}"}
    assert presented_keys(headers) == ["key-a"]
    del headers["X-API-Key"]
    assert presented_keys(headers) == ["key-admin"]


def test_no_key_or_an_unknown_one_is_401():
    with pytest.raises(Unauthorized):
        auth({})
    with pytest.raises(Unauthorized):
        auth({"X-API-Key": "nope"})


def test_the_tenant_comes_from_headers_then_query_then_the_key():
    assert auth({"X-API-Key": "key-any", "X-Tenant-ID": "t1",
                 "X-Cordum-Tenant": "t2"}, {"tenant_id": "t3"}).tenant == "t1"
    assert auth({"X-API-Key": "key-any", "X-Cordum-Tenant": "t2"},
                {"tenant_id": "t3"}).tenant == "t2"
    assert auth({"X-API-Key": "key-any"}, {"tenant_id": "t3", "tenant": "t4"}).tenant == "t3"
    assert auth({"X-API-Key": "key-any"}, {"tenant": "t4"}).tenant == "t4"
    assert auth({"X-API-Key": "key-a"}).tenant == "acme"


def test_a_key_acts_for_its_own_tenant_only():
    with pytest.raises(Forbidden):
        auth({"X-API-Key": "key-a", "X-Tenant-ID": "other"})
    with pytest.raises(Forbidden):
        auth({"X-API-Key": "key-a"}, {"tenant": "*"})
    assert auth({"X-API-Key": "key-a", "X-Tenant-ID": "acme"}).tenant == "acme"


def test_an_any_tenant_key_naming_none_streams_every_tenant():
    caller = auth({"X-API-Key": "key-any"})
    assert caller.tenant is None and caller.sees("acme") and caller.sees("other")
    assert auth({"X-API-Key": "key-any", "X-Tenant-ID": "*"}).tenant is None


def test_events_of_no_tenant_are_for_admins_only():
    assert auth({"X-API-Key": "key-admin"}).sees(None)
    user = auth({"X-API-Key": "key-a"})
    assert not user.sees(None) and user.sees("acme") and not user.sees("other")


def test_the_recheck_cuts_off_a_removed_key_or_a_changed_entry():
    keys = list(KEYS)
    now = [0.0]
    ring = KeyRing(lambda: list(keys), KeyRefreshPolicy(ttl_s=1.0), clock=lambda: now[0])
    stream_auth = StreamAuth(ring)
    caller = asyncio.run(stream_auth.authenticate({"X-API-Key": "key-a"}, {}))

    def valid_later() -> bool:
        now[0] += 2.0  # past the ring's TTL: it reads its source again
        return asyncio.run(stream_auth.still_valid(caller))

    assert valid_later()
    keys[0] = ApiKey(key="key-a", tenant="acme", role="admin")
    assert not valid_later()
    keys[0] = ApiKey(key="key-b", tenant="acme", role="user")
    assert not valid_later()
    keys[0] = ApiKey(key="key-a", tenant="acme", role="user")
    assert valid_later()
