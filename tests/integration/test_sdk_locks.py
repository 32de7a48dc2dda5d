"""cordum-sdk 0.1.0's lock operations against the lock routes: every call of the
published client's ``locks`` group (acquire_lock, renew_lock, release_lock, get_lock,
list_admin_locks), over HTTP to a loopback server that hands each request to the
gateway function as API Gateway would, on the real Redis.

cordum-sdk 0.1.0 generates the ``locks`` group but lists no ``locks`` namespace on its
client (``client.locks`` is an AttributeError), so the test builds that namespace the
way the client builds each of its own (``ResourceNamespace`` over the generated
package): the calls go through the client's tenant header, auth and error mapping.

Every answer is parsed by the client's generated models: ``Lock`` (its ``mode`` enum
is upper case and ``owners`` a list: Cordum's server answers ``exclusive`` and a map
of counts, which the SDK cannot read), ``ReleaseLockResponse200`` (``lock`` is always
an object) and ``ListAdminLocksResponse200``. The gateway's extras
(``fencing_token``, ``owner``, ``owner_expires_at``, ``mode``, ``owner_count``) come
through as additional properties.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.models import (
    AdminLock,
    ListAdminLocksResponse200,
    Lock,
    LockMode,
    LockRequest,
    LockRequestMode,
    ReleaseLockResponse200,
)
from cordum_sdk._namespaces import ResourceNamespace
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import AuthorizationError, ConflictError, NotFoundError, ValidationError

from cordum import runtime
from tests import helpers
from tests.sdk_loopback import loopback_gateway, namespace

ADMIN = "sdk-locks-admin"
AGENT = "sdk-locks-agent"
OTHER = "sdk-locks-other"
VIEWER = "sdk-locks-viewer"


@dataclass
class Sdk:
    tenant: str
    admin: ResourceNamespace
    agent: ResourceNamespace
    other: ResourceNamespace
    viewer: ResourceNamespace


@pytest.fixture
def sdk(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sdk]:
    tenant = f"sdk-lk-{unique}"
    helpers.use_gateway(monkeypatch, [
        {"key": ADMIN, "tenant": tenant, "role": "admin", "principal_id": "ops"},
        {"key": AGENT, "tenant": tenant, "role": "locks.write", "principal_id": "agent"},
        {"key": OTHER, "tenant": tenant, "role": "locks.write", "principal_id": "other"},
        {"key": VIEWER, "tenant": tenant, "role": "viewer", "principal_id": "viewer"}])
    with helpers.gateway_process(), loopback_gateway() as url:
        clients = [CordumClient(url, key, tenant_id=tenant,
                                retry_policy=RetryPolicy(max_retries=0))
                   for key in (ADMIN, AGENT, OTHER, VIEWER)]
        try:
            yield Sdk(tenant, *(namespace(c, "locks") for c in clients))
        finally:
            for client in clients:
                client.close()
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"rlock:*{unique}*"))


def request(resource: str, owner: str, mode: LockRequestMode | None = None,
            ttl_ms: int | None = None) -> LockRequest:
    fields: dict[str, object] = {}
    if mode is not None:
        fields["mode"] = mode
    if ttl_ms is not None:
        fields["ttl_ms"] = ttl_ms
    return LockRequest(resource=resource, owner=owner, **fields)  # type: ignore[arg-type]


def test_the_namespace_has_cordums_five_lock_calls(sdk: Sdk) -> None:
    assert dir(sdk.agent) == ["acquire_lock", "get_lock", "list_admin_locks", "release_lock",
                              "renew_lock"]


def test_acquire_renew_get_and_release_parse(sdk: Sdk) -> None:
    got = sdk.agent.acquire_lock(body=request("deploy", "w-1", LockRequestMode.EXCLUSIVE,
                                              10_000))
    assert isinstance(got, Lock)
    assert (got.resource, got.mode, got.owners) == ("deploy", LockMode.EXCLUSIVE, ["w-1"])
    assert isinstance(got.updated_at, datetime) and isinstance(got.expires_at, datetime)
    now = datetime.now(UTC)
    assert now + timedelta(seconds=8) < got.expires_at < now + timedelta(seconds=12)
    token = got["fencing_token"]
    assert isinstance(token, int) and got["owner"] == "w-1"

    renewed = sdk.agent.renew_lock(body=request("deploy", "w-1", ttl_ms=60_000))
    assert isinstance(renewed, Lock) and renewed["fencing_token"] == token
    assert renewed.expires_at > got.expires_at  # type: ignore[operator]

    read = sdk.viewer.get_lock(resource="deploy")
    assert isinstance(read, Lock)
    assert (read.owners, read.mode, read["fencing_token"]) == (["w-1"], LockMode.EXCLUSIVE,
                                                                token)

    released = sdk.agent.release_lock(body=request("deploy", "w-1"))
    assert isinstance(released, ReleaseLockResponse200)
    assert released.released is True
    assert isinstance(released.lock, Lock) and released.lock.owners == []
    with pytest.raises(NotFoundError, match="lock not found"):
        sdk.viewer.get_lock(resource="deploy")


def test_shared_locks_parse_with_their_owners(sdk: Sdk) -> None:
    sdk.agent.acquire_lock(body=request("data", "r-1", LockRequestMode.SHARED))
    both = sdk.other.acquire_lock(body=request("data", "r-2", LockRequestMode.SHARED))
    assert isinstance(both, Lock)
    assert (both.mode, both.owners) == (LockMode.SHARED, ["r-1", "r-2"])
    left = sdk.agent.release_lock(body=request("data", "r-1"))
    assert isinstance(left, ReleaseLockResponse200) and isinstance(left.lock, Lock)
    assert (left.lock.mode, left.lock.owners) == (LockMode.SHARED, ["r-2"])


def test_refusals_raise_the_sdks_errors(sdk: Sdk) -> None:
    sdk.agent.acquire_lock(body=request("busy", "w-1"))
    with pytest.raises(ConflictError, match="lock unavailable"):
        sdk.other.acquire_lock(body=request("busy", "w-2"))
    with pytest.raises(AuthorizationError):
        sdk.other.release_lock(body=request("busy", "w-1"))  # another principal's hold
    with pytest.raises(AuthorizationError):
        sdk.viewer.acquire_lock(body=request("busy", "v"))
    with pytest.raises(NotFoundError, match="lock not held"):
        sdk.agent.renew_lock(body=request("never", "w-1"))
    with pytest.raises(ConflictError, match="lock not held"):
        sdk.agent.release_lock(body=request("never", "w-1"))
    with pytest.raises(ValidationError, match="ttl_ms"):
        sdk.agent.acquire_lock(body=request("r", "w", ttl_ms=10))


def test_the_admin_list_parses(sdk: Sdk) -> None:
    empty = sdk.admin.list_admin_locks()
    assert isinstance(empty, ListAdminLocksResponse200) and empty.locks == []
    sdk.agent.acquire_lock(body=request("b", "w-b"))
    sdk.admin.acquire_lock(body=request("a", "w-a", ttl_ms=20_000))
    listed = sdk.admin.list_admin_locks()
    assert isinstance(listed, ListAdminLocksResponse200)
    assert all(isinstance(e, AdminLock) for e in listed.locks)
    assert [(e.key, e.holder, e.type) for e in listed.locks] == [
        ("a", "w-a", "resource"), ("b", "w-b", "resource")]
    assert 15_000 < listed.locks[0].ttl_remaining_ms <= 20_000
    assert listed.locks[0]["owner_count"] == 1
    with pytest.raises(AuthorizationError):
        sdk.agent.list_admin_locks()
