"""cordum-sdk 0.1.0's ``schemas`` and ``topics`` namespaces against the schema registry
routes: every method of the published client, over HTTP to a loopback server that hands
each request to the gateway function as API Gateway would, on the real Redis.

cordum-sdk 0.1.0 generates the ``schemas`` and ``topics`` operations but registers no
namespace for them (``client.schemas`` is an AttributeError): the tests build each
namespace as the client builds its own (``ResourceNamespace`` over the generated
package), so every call goes through the client's tenant header, auth and error
mapping. Each answer is parsed by the client's own generated models. Where Cordum's
server answers in a shape the SDK cannot read, this gateway answers in the SDK's: the
schema list holds records (``{id, schema}``), not bare ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.models import (
    CreateTopicBody,
    ListSchemasResponse200,
    ListTopicsResponse200,
    SchemaRecord,
    SchemaRecordSchema,
    TopicResponse,
)
from cordum_sdk._generated.types import UNSET
from cordum_sdk._namespaces import ResourceNamespace
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import NotFoundError

from cordum import runtime
from tests import helpers
from tests.sdk_loopback import loopback_gateway, namespace

ADMIN = "sdk-schemas-admin"
VIEWER = "sdk-schemas-viewer"
ORDER = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}


@dataclass
class Clients:
    schemas: ResourceNamespace
    topics: ResourceNamespace


@dataclass
class Sdk:
    tenant: str
    admin: Clients
    viewer: Clients


@pytest.fixture
def sdk(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sdk]:
    tenant = f"sdk-sr-{unique}"
    helpers.use_gateway(monkeypatch, [
        {"key": ADMIN, "tenant": tenant, "role": "admin", "principal_id": "ops"},
        {"key": VIEWER, "tenant": tenant, "role": "viewer", "principal_id": "v"}])
    with helpers.gateway_process(), loopback_gateway() as url:
        clients = [CordumClient(url, key, tenant_id=tenant,
                                retry_policy=RetryPolicy(max_retries=0))
                   for key in (ADMIN, VIEWER)]
        try:
            yield Sdk(tenant, *(Clients(namespace(c, "schemas"), namespace(c, "topics"))
                                for c in clients))
        finally:
            for client in clients:
                client.close()
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"*{unique}*"))


def test_a_schema_is_created_listed_read_and_deleted_through_the_sdk(sdk: Sdk) -> None:
    body = SchemaRecord(id="order", schema=SchemaRecordSchema.from_dict(ORDER))
    assert sdk.admin.schemas.create_schema(body=body) is None

    listed = sdk.viewer.schemas.list_schemas()
    assert isinstance(listed, ListSchemasResponse200)
    [record] = listed.schemas
    assert isinstance(record, SchemaRecord)
    assert (record.id, record.schema.to_dict()) == ("order", ORDER)
    assert len(record["sha256"]) == 64 and listed["next_cursor"] is None

    got = sdk.viewer.schemas.get_schema("order")
    assert isinstance(got, SchemaRecord) and got.schema.to_dict() == ORDER

    assert sdk.admin.schemas.delete_schema("order") is None
    with pytest.raises(NotFoundError, match="schema not found"):
        sdk.viewer.schemas.get_schema("order")
    assert sdk.viewer.schemas.list_schemas().schemas == []


def test_topics_are_created_listed_and_deleted_through_the_sdk(sdk: Sdk) -> None:
    sdk.admin.schemas.create_schema(
        body=SchemaRecord(id="order", schema=SchemaRecordSchema.from_dict(ORDER)))
    empty = sdk.viewer.topics.list_topics()
    assert isinstance(empty, ListTopicsResponse200)
    assert (empty.items, empty.registry_empty) == ([], True)

    made = sdk.admin.topics.create_topic(body=CreateTopicBody(
        name="job.orders", pool="default", input_schema_id="order", risk_tags=["pii"]))
    assert isinstance(made, TopicResponse)
    assert (made.name, made.status, made.input_schema_id, made.risk_tags) == (
        "job.orders", "active", "order", ["pii"])
    assert made.output_schema_id is UNSET and made["tenant_id"] == sdk.tenant

    listed = sdk.viewer.topics.list_topics()
    [item] = listed.items
    assert isinstance(item, TopicResponse) and listed.registry_empty is False
    assert (item.name, item.pool, item.input_schema_id, item.active_worker_count) == (
        "job.orders", "default", "order", 0)

    assert sdk.admin.topics.delete_topic("job.orders") is None
    with pytest.raises(NotFoundError, match="topic not found"):
        sdk.admin.topics.delete_topic("job.orders")
