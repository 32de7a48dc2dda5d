"""API keys: formats, tenant binding, constant-time match."""

from __future__ import annotations

import json

import pytest

from cordum.gateway.auth import Authenticator, KeyConfigError, load_keys, parse_keys
from cordum.gateway.errors import ApiError


def test_json_and_comma_formats():
    keys = parse_keys(json.dumps([{"key": "k1", "tenant": "acme", "role": "user"}]))
    assert (keys[0].key, keys[0].tenant, keys[0].role) == ("k1", "acme", "user")
    assert [k.key for k in parse_keys(" a , b ,")] == ["a", "b"]
    assert parse_keys("a")[0].tenant == ""


@pytest.mark.parametrize("raw", ["[{", '[{"tenant": "x"}]'])
def test_bad_key_config_is_refused_with_the_variable_name(raw):
    with pytest.raises(KeyConfigError, match="CORDUM_API_KEYS"):
        parse_keys(raw)


def test_keys_from_file_and_single_key(tmp_path):
    path = tmp_path / "keys"
    path.write_text("file-key")
    keys = load_keys({"CORDUM_API_KEY": "single", "CORDUM_API_KEYS_PATH": str(path)})
    assert {k.key for k in keys} == {"single", "file-key"}


def test_bound_key_cannot_act_for_another_tenant():
    auth = Authenticator(parse_keys(json.dumps([{"key": "k", "tenant": "acme"}])))
    assert auth.authenticate({"x-api-key": "k"}).tenant == "acme"
    assert auth.authenticate({"x-api-key": "k", "x-tenant-id": "acme"}).tenant == "acme"
    with pytest.raises(ApiError) as info:
        auth.authenticate({"x-api-key": "k", "x-tenant-id": "globex"})
    assert info.value.status == 403


def test_unbound_key_takes_the_header_tenant_or_default():
    auth = Authenticator(parse_keys("k"))
    assert auth.authenticate({"authorization": "Bearer k", "x-tenant-id": "t1"}).tenant == "t1"
    assert auth.authenticate({"x-api-key": "k"}).tenant == "default"


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "nope"}, {"authorization": "Basic k"}])
def test_unknown_or_missing_key_is_401(headers):
    with pytest.raises(ApiError) as info:
        Authenticator(parse_keys("k")).authenticate(headers)
    assert info.value.status == 401 and info.value.body()["code"] == "unauthorized"


def test_no_keys_configured_refuses_everything():
    with pytest.raises(ApiError):
        Authenticator([]).authenticate({"x-api-key": ""})
