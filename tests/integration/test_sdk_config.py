"""cordum-sdk 0.1.0's config operations against the config routes, over HTTP to a
loopback server that hands each request to the gateway function as API Gateway would.

The client's facade has no ``config`` namespace, so its generated operations are called
with the generated ``AuthenticatedClient``. Each answer is parsed by the SDK's own
``ConfigDocument``: ``get_config`` asks for the envelope (``envelope=true``, its
default); ``get_effective_config`` reads the snapshot ``{version, hash, data}`` as a
document whose ``data`` is the merged config (``version`` and ``hash`` as extra
properties); ``set_config`` (POST) and ``replace_config`` (PUT) answer 204.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cordum_sdk._generated.api.config import (
    get_config,
    get_effective_config,
    replace_config,
    set_config,
)
from cordum_sdk._generated.client import AuthenticatedClient
from cordum_sdk._generated.models import ConfigDocument, ConfigDocumentScope, GetConfigScope
from cordum_sdk._generated.models.config_document_data import ConfigDocumentData

from cordum import runtime
from tests import helpers
from tests.integration.test_gateway_config import ADMIN, READER, Api, forget
from tests.sdk_loopback import loopback_gateway


@pytest.fixture
def sdk(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, str]]:
    api = Api(unique, monkeypatch)
    with helpers.gateway_process(), loopback_gateway() as url:
        runtime.run(forget([api.tenant]))
        try:
            yield api, url
        finally:
            runtime.run(forget([api.tenant]))


def client(url: str, key: str) -> AuthenticatedClient:
    return AuthenticatedClient(base_url=url, token=key, prefix="", auth_header_name="X-API-Key")


def document(scope: ConfigDocumentScope, scope_id: str, data: dict) -> ConfigDocument:
    return ConfigDocument(scope=scope, scope_id=scope_id, data=ConfigDocumentData.from_dict(data))


def test_documents_are_set_replaced_and_read_through_the_sdk(sdk) -> None:
    api, url = sdk
    with client(url, ADMIN) as admin, client(url, READER) as reader:
        done = set_config.sync_detailed(
            client=admin, x_tenant_id=api.tenant,
            body=document(ConfigDocumentScope.TEAM, "blue", {"mode": "strict", "n": 1}))
        assert done.status_code == 204
        done = replace_config.sync_detailed(
            client=admin, x_tenant_id=api.tenant,
            body=document(ConfigDocumentScope.TEAM, "blue", {"n": 2}))
        assert done.status_code == 204

        got = get_config.sync(client=reader, x_tenant_id=api.tenant, scope=GetConfigScope.TEAM,
                              scope_id="blue")
        assert isinstance(got, ConfigDocument)
        assert (got.scope, got.scope_id) == (ConfigDocumentScope.TEAM, "blue")
        assert got.data.to_dict() == {"mode": "strict", "n": 2}
        assert got["revision"] == 2 and got["updated_at"].endswith("Z")

        # A refusal is a status the client reports, not a parse failure.
        refused = set_config.sync_detailed(
            client=reader, x_tenant_id=api.tenant,
            body=document(ConfigDocumentScope.TEAM, "blue", {"n": 3}))
        assert refused.status_code == 403 and refused.parsed is None


def test_the_effective_config_parses_as_a_document(sdk) -> None:
    api, url = sdk
    with client(url, ADMIN) as admin:
        for scope, scope_id, data in ((ConfigDocumentScope.ORG, "", {"a": 1, "o": {"x": 1}}),
                                      (ConfigDocumentScope.TEAM, "blue", {"o": {"y": 2}})):
            assert set_config.sync_detailed(client=admin, x_tenant_id=api.tenant,
                                             body=document(scope, scope_id, data)
                                             ).status_code == 204
        snap = get_effective_config.sync(client=admin, x_tenant_id=api.tenant, team_id="blue")
        assert isinstance(snap, ConfigDocument)
        assert snap.data.to_dict() == {"a": 1, "o": {"x": 1, "y": 2}}
        assert snap["version"] == "system:0|org:1|team:1|workflow:0|step:0"
        assert len(snap["hash"]) == 64
