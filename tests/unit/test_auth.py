"""API keys: formats, tenant binding, key id and refresh settings, without any key source.

Reading keys from a file, SSM or Secrets Manager: tests/integration/test_api_key_sources.py.
"""

from __future__ import annotations

import json

import pytest

from cordum.gateway.core.auth import (
    Authenticator,
    KeyConfigError,
    KeyLoader,
    KeyRefreshPolicy,
    Principal,
    key_id,
    parse_keys,
)
from cordum.gateway.core.errors import GatewayError as ApiError

OLD_KEY = "sk-old-4f1c9a7be2d0"
NEW_KEY = "sk-new-8b2e6d0c1f3a"


def test_json_and_comma_formats():
    keys = parse_keys(json.dumps([{"key": "k1", "tenant": "acme", "role": "user"}]))
    assert (keys[0].key, keys[0].tenant, keys[0].role) == ("k1", "acme", "user")
    assert [k.key for k in parse_keys(" a , b ,")] == ["a", "b"]
    # A key grants only what its entry says: no role is a user, no tenant is "default".
    assert (parse_keys("a")[0].tenant, parse_keys("a")[0].role) == ("default", "user")
    bare = parse_keys(json.dumps([{"key": "k2"}]))[0]
    assert (bare.tenant, bare.role, bare.principal_id) == ("default", "user", "")
    assert parse_keys(json.dumps([{"key": "k3", "tenant": "*"}]))[0].tenant == "*"


@pytest.mark.parametrize("raw", ["[{", '[{"tenant": "x"}]'])
def test_bad_key_config_is_refused_with_the_variable_name(raw):
    with pytest.raises(KeyConfigError, match="CORDUM_API_KEYS"):
        parse_keys(raw)


def test_bound_key_cannot_act_for_another_tenant():
    auth = Authenticator(parse_keys(json.dumps([{"key": "k", "tenant": "acme"}])))
    assert auth.authenticate({"x-api-key": "k"}).tenant == "acme"
    assert auth.authenticate({"x-api-key": "k", "x-tenant-id": "acme"}).tenant == "acme"
    with pytest.raises(ApiError) as info:
        auth.authenticate({"x-api-key": "k", "x-tenant-id": "globex"})
    assert info.value.status == 403 and info.value.message == "tenant access denied"


def test_any_tenant_key_takes_the_header_tenant_or_default():
    auth = Authenticator(parse_keys(json.dumps([{"key": "k", "tenant": "*"}])))
    assert auth.authenticate({"authorization": "Bearer k", "x-tenant-id": "t1"}).tenant == "t1"
    assert auth.authenticate({"x-api-key": "k"}).tenant == "default"
    # "*" is the key's reach, not a tenant to act in.
    with pytest.raises(ApiError) as info:
        auth.authenticate({"x-api-key": "k", "x-tenant-id": "*"})
    assert info.value.status == 403


@pytest.mark.parametrize("keys", ["k", json.dumps([{"key": "k", "role": "user"}])])
def test_key_without_tenant_is_bound_to_default(keys):
    auth = Authenticator(parse_keys(keys))
    assert auth.authenticate({"x-api-key": "k"}).tenant == "default"
    assert auth.authenticate({"x-api-key": "k", "x-tenant-id": "default"}).tenant == "default"
    for header in ("x-tenant-id", "x-cordum-tenant"):
        with pytest.raises(ApiError) as info:
            auth.authenticate({"x-api-key": "k", header: "t1"})
        assert info.value.status == 403


def test_single_key_is_a_user_of_the_default_tenant():
    (key,) = KeyLoader({"CORDUM_API_KEY": " single "})()
    assert (key.key, key.tenant, key.role) == ("single", "default", "user")


def test_cordum_tenant_header_is_used_only_without_x_tenant_id():
    auth = Authenticator(parse_keys(json.dumps([{"key": "k", "tenant": "*"}])))
    assert auth.authenticate({"x-api-key": "k", "x-cordum-tenant": "t2"}).tenant == "t2"
    # cordum-sdk sends both; a per-call X-Tenant-ID override makes them differ: it wins.
    both = {"x-api-key": "k", "x-tenant-id": "t1", "x-cordum-tenant": "t2"}
    assert auth.authenticate(both).tenant == "t1"
    assert auth.authenticate({"x-api-key": "k", "x-tenant-id": "  ",
                              "x-cordum-tenant": "t2"}).tenant == "t2"


def test_cordum_tenant_header_is_still_checked_against_a_bound_key():
    auth = Authenticator(parse_keys(json.dumps([{"key": "k", "tenant": "acme"}])))
    assert auth.authenticate({"x-api-key": "k", "x-cordum-tenant": "acme"}).tenant == "acme"
    with pytest.raises(ApiError) as info:
        auth.authenticate({"x-api-key": "k", "x-cordum-tenant": "globex"})
    assert info.value.status == 403
    # X-Tenant-ID wins, so a matching X-Tenant-ID is enough.
    assert auth.authenticate({"x-api-key": "k", "x-tenant-id": "acme",
                              "x-cordum-tenant": "globex"}).tenant == "acme"


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "nope"}, {"authorization": "Basic k"}])
def test_unknown_or_missing_key_is_401(headers):
    with pytest.raises(ApiError) as info:
        Authenticator(parse_keys("k")).authenticate(headers)
    assert info.value.status == 401 and info.value.body()["code"] == "unauthorized"


def test_no_keys_configured_refuses_everything():
    with pytest.raises(ApiError):
        Authenticator([]).authenticate({"x-api-key": ""})


def test_principal_carries_a_stable_non_secret_key_id():
    keys = json.dumps([{"key": OLD_KEY, "role": "user", "principal_id": "svc-a"},
                       {"key": NEW_KEY}])
    auth = Authenticator(parse_keys(keys))
    who = auth.authenticate({"x-api-key": OLD_KEY})
    assert (who.role, who.principal_id) == ("user", "svc-a")
    assert len(who.key_id) == 12 and int(who.key_id, 16) >= 0
    assert who.key_id == key_id(OLD_KEY) == auth.authenticate({"x-api-key": OLD_KEY}).key_id
    assert who.key_id != auth.authenticate({"x-api-key": NEW_KEY}).key_id
    assert who.key_id not in OLD_KEY
    # A key without a principal_id is named by its key id.
    assert auth.authenticate({"x-api-key": NEW_KEY}).principal_id == f"key:{key_id(NEW_KEY)}"
    assert auth.authenticate({"x-api-key": NEW_KEY}).role == "user"
    # Code that builds a Principal itself keeps working.
    assert Principal(tenant="t", role="admin", principal_id="").key_id == ""


def test_key_value_is_not_in_the_repr():
    assert OLD_KEY not in repr(parse_keys(OLD_KEY))


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "inf"])
def test_bad_ttl_is_refused_with_the_variable_name(raw):
    with pytest.raises(KeyConfigError, match="CORDUM_API_KEYS_TTL_S"):
        Authenticator.from_env({"CORDUM_API_KEY": "k", "CORDUM_API_KEYS_TTL_S": raw})


def test_ttl_default_and_override():
    assert KeyRefreshPolicy.from_env({}).ttl_s == 300
    assert KeyRefreshPolicy.from_env({"CORDUM_API_KEYS_TTL_S": "30"}).ttl_s == 30
