"""cordum-sdk 0.1.0's ``memory`` operations against the artifact and memory routes: every
one of the published client, over HTTP to a loopback server that hands each request to
the gateway function as API Gateway would, on the real Redis.

The client of 0.1.0 has no ``memory`` namespace (its namespaces list no such group), so
the generated operations (``_generated.api.memory``) are run through the client's own
invocation, as its namespaces run theirs: the same key, tenant header, retries and
errors (a 404 raises NotFoundError).

Each answer is parsed by the client's own generated models and the values it reads are
checked. ``get_artifact`` puts the pointer into the path as it is
(``/api/v1/artifacts/redis://art:<id>``): the gateway serves that path too.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.api.memory import create_artifact, get_artifact, get_memory
from cordum_sdk._generated.models import (
    ArtifactDetail,
    CreateArtifactRequest,
    CreateArtifactRequestLabels,
    CreateArtifactResponse,
    GetMemoryResponse200,
)
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import NotFoundError

from tests import helpers
from tests.artifacts_world import World
from tests.sdk_loopback import loopback_gateway


class Sdk:
    def __init__(self, world: World, url: str) -> None:
        self.world = world
        self.client = CordumClient(url, world.user, tenant_id=world.tenant,
                                   retry_policy=RetryPolicy(max_retries=0))
        self.other = CordumClient(url, world.other, tenant_id=world.other_tenant,
                                  retry_policy=RetryPolicy(max_retries=0))

    @staticmethod
    def call(client: CordumClient, operation: Any, *args: Any, **kwargs: Any) -> Any:
        """``operation`` (a module of ``_generated.api.memory``) as ``client`` runs it."""
        return client._invoke_operation(operation, *args, **kwargs)

    def close(self) -> None:
        self.client.close()
        self.other.close()


@pytest.fixture
def sdk(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sdk]:
    world = World(unique, monkeypatch)
    with helpers.gateway_process(), loopback_gateway() as url:
        client = Sdk(world, url)
        try:
            yield client
        finally:
            client.close()


def _create(sdk: Sdk, data: bytes, **fields: object) -> CreateArtifactResponse:
    body = CreateArtifactRequest(content_base64=base64.b64encode(data).decode(),
                                 content_type="application/json", **fields)  # type: ignore[arg-type]
    made = sdk.call(sdk.client, create_artifact, body=body)
    assert isinstance(made, CreateArtifactResponse)
    return made


def test_an_artifact_is_created_and_read_back_through_the_sdk(sdk: Sdk) -> None:
    data = b'{"report": [1, 2, 3]}'
    made = _create(sdk, data, retention="audit",
                   labels=CreateArtifactRequestLabels.from_dict({"team": "blue"}))
    assert isinstance(made.artifact_ptr, str) and made.artifact_ptr.startswith("redis://art:")
    assert made.size_bytes == len(data)
    assert made.additional_properties["storage"] == "redis"

    detail = sdk.call(sdk.client, get_artifact, made.artifact_ptr)
    assert isinstance(detail, ArtifactDetail)
    assert detail.artifact_ptr == made.artifact_ptr
    assert base64.b64decode(detail.content_base64) == data
    meta = detail.metadata
    assert meta.content_type == "application/json" and meta.size_bytes == len(data)
    assert meta.retention == "audit"
    assert isinstance(meta.created_at, datetime) and meta.created_at.tzinfo is not None
    assert meta.labels.to_dict() == {"team": "blue", "tenant_id": sdk.world.tenant}


def test_get_memory_parses_an_artifact_and_a_jobs_context(sdk: Sdk) -> None:
    made = _create(sdk, b'{"k": "v"}')
    read = sdk.call(sdk.client, get_memory, ptr=made.artifact_ptr)
    assert isinstance(read, GetMemoryResponse200)
    found = read.to_dict()
    assert found["kind"] == "artifact" and found["pointer"] == made.artifact_ptr
    assert found["json"] == {"k": "v"} and found["size_bytes"] == 10
    assert base64.b64decode(found["base64"]) == b'{"k": "v"}'

    job_id = sdk.world.job(context={"prompt": "from the sdk"}, result={"ok": True})
    ctx = sdk.call(sdk.client, get_memory, key=f"ctx:{job_id}")
    assert isinstance(ctx, GetMemoryResponse200)
    assert ctx.to_dict()["kind"] == "context"
    assert ctx.to_dict()["json"] == {"prompt": "from the sdk"}
    res = sdk.call(sdk.client, get_memory, ptr=f"redis://res:{job_id}")
    assert isinstance(res, GetMemoryResponse200)
    assert res.to_dict()["json"] == {"ok": True}


def test_another_tenant_reads_nothing_through_the_sdk(sdk: Sdk) -> None:
    made = _create(sdk, b"{}")
    with pytest.raises(NotFoundError):
        sdk.call(sdk.other, get_artifact, made.artifact_ptr)
    with pytest.raises(NotFoundError):
        sdk.call(sdk.other, get_memory, ptr=made.artifact_ptr)
