"""The artifact list through the gateway on the real Redis: the tenant's artifacts newest
first (metadata only), pages that cover the list once under any limit (artifacts made in
the same millisecond too), the bad limits and cursors, entries whose metadata is gone
skipped and dropped, the index bounded and pruned, another tenant's index never read,
and the round trips: making an artifact is still one, a page two."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from cordum import runtime
from cordum.gateway.artifacts import service as artifact_service
from cordum.store import artifact_index, artifacts
from cordum.store.artifact_index import Position, index_key
from cordum.store.artifacts import ArtifactStore, meta_key
from tests.artifacts_world import World
from tests.helpers import delete_keys

LIST = "/api/v1/artifacts"


@pytest.fixture
def world(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    world = World(unique, monkeypatch)
    yield world
    runtime.run(delete_keys(world.redis, f"{artifact_index.INDEX_PREFIX}*{unique}"))


class Counting:
    """The real client, counting what it sends: a pipeline (MULTI or not) is one round
    trip, as is any command sent on its own."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self.trips: list[str] = []

    def pipeline(self, transaction: bool = True) -> Any:
        self.trips.append("pipeline")
        return self._redis.pipeline(transaction=transaction)

    def __getattr__(self, name: str) -> Any:
        command = getattr(self._redis, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.trips.append(name)
            return await command(*args, **kwargs)

        return counted


def _ids(world: World, n: int, **fields: Any) -> list[str]:
    """``n`` artifacts made one after the other, each in a millisecond of its own (the
    order of one millisecond's artifacts is their ids'): their ids, oldest first."""
    made = []
    for i in range(n):
        time.sleep(0.002)
        made.append(world.put(f"artifact {i}", **fields)["artifact_ptr"]
                    .removeprefix("redis://art:"))
    return made


def _page(world: World, *, key: str | None = None, tenant: str | None = None,
          **query: str) -> dict[str, Any]:
    status, body = world.call("GET", LIST, key=key, tenant=tenant, query=query or None)
    assert status == 200, body
    return body


def _walk(world: World, limit: int) -> list[str]:
    """Every id the list gives, page after page."""
    seen: list[str] = []
    cursor = ""
    for _ in range(100):
        body = _page(world, limit=str(limit), **({"cursor": cursor} if cursor else {}))
        assert len(body["items"]) <= limit
        seen += [item["id"] for item in body["items"]]
        if body["next_cursor"] is None:
            return seen
        cursor = body["next_cursor"]
    raise AssertionError("the list did not end")


def test_the_list_is_the_tenants_artifacts_newest_first_metadata_only(world: World) -> None:
    assert _page(world) == {"items": [], "next_cursor": None}
    made = _ids(world, 3, content_type="text/plain", retention="short",
                labels={"team": "blue"})
    body = _page(world, key=world.viewer)  # any role of the tenant lists, as it reads
    assert [item["id"] for item in body["items"]] == made[::-1]
    assert body["next_cursor"] is None
    first = body["items"][-1]
    assert set(first) == {"artifact_ptr", "id", "content_type", "size_bytes", "retention",
                          "storage", "created_at", "expires_at", "labels"}
    assert first["artifact_ptr"] == f"redis://art:{made[0]}"
    assert first["content_type"] == "text/plain" and first["size_bytes"] == len("artifact 0")
    assert first["retention"] == "short" and first["storage"] == "redis"
    assert first["labels"] == {"team": "blue", "tenant_id": world.tenant}
    created = datetime.fromisoformat(first["created_at"])
    expires = datetime.fromisoformat(first["expires_at"])
    assert (expires - created).total_seconds() == 86400


def test_pages_cover_the_list_once_whatever_the_limit(world: World) -> None:
    made = _ids(world, 7)
    for limit in (1, 2, 3, 7, 50):
        assert _walk(world, limit) == made[::-1], limit
    body = _page(world, limit="3")
    assert len(body["items"]) == 3 and body["next_cursor"]


def test_artifacts_of_one_millisecond_are_neither_lost_nor_repeated(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    older = _ids(world, 2)
    monkeypatch.setattr(artifacts, "_now", lambda: ("2026-11-27T10:00:00.000Z",
                                                    int(time.time() * 1000) + 5000))
    same = _ids(world, 5)
    for limit in (1, 2, 3, 4):
        seen = _walk(world, limit)
        assert sorted(seen[:5]) == sorted(same) and seen[5:] == older[::-1], limit
        assert len(seen) == len(set(seen)) == 7


@pytest.mark.parametrize(("query", "code"), [
    ({"limit": "0"}, "INVALID_LIMIT"), ({"limit": "-1"}, "INVALID_LIMIT"),
    ({"limit": "ten"}, "INVALID_LIMIT"), ({"limit": "1.5"}, "INVALID_LIMIT"),
    ({"limit": "9" * 30}, "INVALID_LIMIT"),
    ({"cursor": "not a cursor!"}, "INVALID_CURSOR"),
    ({"cursor": "MTIzOjA6YWJj"}, "INVALID_CURSOR"),  # "123:0:abc": no entry is tie 0
    ({"cursor": "MTIzOjE6YS9i"}, "INVALID_CURSOR"),  # "123:1:a/b": no artifact id
    ({"cursor": "9" * 200}, "INVALID_CURSOR"),
])
def test_a_bad_limit_or_cursor_is_400(world: World, query: dict[str, str],
                                      code: str) -> None:
    status, body = world.call("GET", LIST, query=query)
    assert (status, body["code"]) == (400, code), body


def test_a_limit_above_the_maximum_is_clamped(world: World) -> None:
    _ids(world, 2)
    assert len(_page(world, limit="5000")["items"]) == 2


def test_artifacts_whose_metadata_is_gone_are_skipped_and_dropped(world: World) -> None:
    made = _ids(world, 4)
    key = index_key(world.tenant)
    runtime.run(world.redis.delete(meta_key(made[1])))
    runtime.run(world.redis.pexpire(meta_key(made[2]), 1))
    time.sleep(0.01)
    assert _walk(world, 50) == [made[3], made[0]]
    assert runtime.run(world.redis.zscore(key, made[1])) is None
    assert runtime.run(world.redis.zscore(key, made[2])) is None
    assert runtime.run(world.redis.zcard(key)) == 2
    # A page of gone ones only is empty, and still leads on.
    now = int(time.time() * 1000)
    runtime.run(world.redis.zadd(key, {art_id: now + i for i, art_id in enumerate(made)}))
    runtime.run(world.redis.delete(meta_key(made[3])))
    body = _page(world, limit="1")
    assert body["items"] == [] and body["next_cursor"]
    assert _walk(world, 1) == [made[0]]


def test_the_index_is_bounded_and_pruned_as_artifacts_are_made(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifact_index, "MAX_INDEXED", 3)
    key = index_key(world.tenant)
    expired = int(time.time() * 1000) - artifacts.LONGEST_RETENTION_MS - 1000
    runtime.run(world.redis.zadd(key, {"long-gone": expired}))
    made = _ids(world, 5)
    assert runtime.run(world.redis.zcard(key)) == 3
    assert runtime.run(world.redis.zscore(key, "long-gone")) is None
    assert _walk(world, 2) == made[:1:-1]
    ttl_ms = runtime.run(world.redis.pttl(key))
    assert artifacts.LONGEST_RETENTION_MS - 60_000 < ttl_ms <= artifacts.LONGEST_RETENTION_MS
    # The artifacts the index let go are still read by pointer.
    assert world.call("GET", f"{LIST}/{made[0]}")[0] == 200


def test_an_uploaded_artifact_is_listed_as_s3_held(world: World) -> None:
    inline = _ids(world, 1)[0]
    time.sleep(0.002)
    ptr, _ = runtime.run(ArtifactStore(world.redis).reserve(
        world.tenant, 10 * 1024 * 1024, content_type="video/mp4", retention="audit",
        labels={}, bucket="cordum-artifacts-test"))
    items = _page(world)["items"]
    assert [item["id"] for item in items] == [ptr.removeprefix("redis://art:"), inline]
    assert items[0]["storage"] == "s3" and items[0]["size_bytes"] == 10 * 1024 * 1024
    assert items[0]["retention"] == "audit" and "bucket" not in items[0]


def test_another_tenants_artifacts_are_never_listed(world: World) -> None:
    mine = _ids(world, 2)
    theirs = world.call("POST", LIST, {"content": "theirs"}, key=world.other,
                        tenant=world.other_tenant)[1]["artifact_ptr"]
    assert _walk(world, 1) == mine[::-1]
    listed = _page(world, key=world.other, tenant=world.other_tenant)["items"]
    assert [item["artifact_ptr"] for item in listed] == [theirs]
    # A cursor of one tenant's list leads nowhere in another's.
    cursor = _page(world, limit="1")["next_cursor"]
    body = _page(world, key=world.other, tenant=world.other_tenant, cursor=cursor)
    assert all(item["id"] not in mine for item in body["items"])


def test_a_page_stops_before_its_byte_budget(world: World,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    made = _ids(world, 5, labels={"note": "n" * 200})
    monkeypatch.setattr(artifact_service, "MAX_PAGE_BYTES", 700)
    body = _page(world, limit="5")
    assert 1 <= len(body["items"]) < 5 and body["next_cursor"]
    assert _walk(world, 5) == made[::-1]


def test_making_an_artifact_is_still_one_round_trip_and_a_page_two(world: World) -> None:
    counting = Counting(world.redis)
    store = ArtifactStore(counting)
    runtime.run(store.put(world.tenant, b"x", content_type="text/plain", retention="short",
                          labels={}))
    assert counting.trips == ["pipeline"]
    counting.trips.clear()
    runtime.run(store.reserve(world.tenant, 10, content_type="text/plain",
                              retention="short", labels={}, bucket="b"))
    assert counting.trips == ["pipeline"]
    counting.trips.clear()
    page = runtime.run(store.page(world.tenant, None, 1))
    assert counting.trips == ["zrevrangebyscore", "mget"]
    assert len(page.items) == 1 and isinstance(page.end, Position)
    # A page that meets a gone entry drops it in one more.
    runtime.run(world.redis.delete(meta_key(page.items[0].art_id)))
    counting.trips.clear()
    runtime.run(store.page(world.tenant, None, 1))
    assert counting.trips == ["zrevrangebyscore", "mget", "zrem"]
