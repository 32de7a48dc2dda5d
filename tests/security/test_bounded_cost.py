"""The cost of a list page and of the job indexes is bounded by what the caller owns.

A tenant that stores thousands of jobs must not make another tenant's job or
approval list slow or short, a list page reads only the fields it shows, and
the terminal indexes, which only ever grow, forget what outlived the metas.

Redis commands are counted on the client side: every command this process sends
goes through ``pack_command`` of redis-py's asyncio connection.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from cordum import runtime
from cordum.bus.streams import ensure_stream
from cordum.store import jobs
from cordum.store.jobs import META_TTL_S, JobState, JobStore, NewJob, index_key
from tests.helpers import call, event
from tests.security.conftest import configure

OTHER_JOBS = 3000
"""Jobs of the other tenant, all newer than the caller's."""
COMMANDS_PER_PAGE = 30
"""Commands one list request may send, whatever the other tenant stores."""
RUNNING_PATH = [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING]
HUGE = "x" * (256 * 1024)
"""A meta field no list shows (a big label set, say): a page must not carry it."""


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode(errors="replace")
    return str(value)


class Commands:
    """Every Redis command sent by this process while recording."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, ...]] = []
        self.on = False

    def naming(self, fragment: str) -> list[tuple[str, ...]]:
        return [c for c in self.sent if any(fragment in a for a in c)]

    def named(self, name: str) -> list[tuple[str, ...]]:
        return [c for c in self.sent if c[0].upper() == name]


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> Commands:
    recorder = Commands()
    original = AbstractConnection.pack_command

    def recording(self: AbstractConnection, *args: Any) -> Any:
        if recorder.on:
            recorder.sent.append(tuple(_text(a) for a in args))
        return original(self, *args)

    monkeypatch.setattr(AbstractConnection, "pack_command", recording)
    return recorder


class Tenants:
    """Tenant ``a`` (the caller, admin key ``a_key``) and tenant ``b`` (the crowd)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.tag = tag
        self.a, self.b = f"bc-a-{tag}", f"bc-b-{tag}"
        self.a_key, self.b_key = f"bc-a-key-{tag}", f"bc-b-key-{tag}"
        self.ids: list[str] = []

    @property
    def store(self) -> JobStore:
        return JobStore(runtime.redis_client())

    def jobs(self, tenant: str, count: int, state: JobState, *, meta: dict[str, str] | None = None,
             path: list[JobState] | None = None, at_once: int = 1) -> list[str]:
        """``count`` jobs created in ``state`` (then moved along ``path``), ``at_once`` at
        a time (at most the client pool's 50 connections: more would wait on the pool,
        and on a busy machine past its timeout): oldest first when one at a time."""
        ids = [f"bc-{tenant}-{len(self.ids) + i:05d}" for i in range(count)]
        self.ids += ids
        store = self.store

        async def one(job_id: str) -> None:
            created = await store.create(NewJob(
                job_id=job_id, trace_id=f"tr-{job_id}", tenant=tenant, topic="job.bc",
                context="{}", request="{}", meta=meta or {}, state=state))
            assert created
            if path:
                await store.transition(job_id, path)

        async def all_of() -> None:
            for start in range(0, count, at_once):
                await asyncio.gather(*(one(j) for j in ids[start:start + at_once]))

        runtime.run(all_of())
        return ids

    def list(self, path: str, commands: Commands, query: dict[str, str]) -> Any:
        commands.sent.clear()
        commands.on = True
        try:
            status, body, _ = call(event("GET", path, key=self.a_key, tenant=self.a,
                                         query=query))
        finally:
            commands.on = False
        assert status == 200, body
        return body

    def cleanup(self) -> None:
        async def drop() -> None:
            r = runtime.redis_client()
            keys = [k async for k in r.scan_iter(match=f"*{self.tag}*", count=5000)]
            for start in range(0, len(keys), 500):
                await r.delete(*keys[start:start + 500])
            for state in JobState:
                for start in range(0, len(self.ids), 500):
                    await r.zrem(index_key(state), *self.ids[start:start + 500])
            for start in range(0, len(self.ids), 500):
                await r.zrem(jobs.RECENT_KEY, *self.ids[start:start + 500])
                await r.zrem(jobs.DEADLINE_KEY, *self.ids[start:start + 500])

        runtime.run(drop())


@pytest.fixture
def tenants(monkeypatch: pytest.MonkeyPatch):
    t = Tenants()
    configure(monkeypatch, keys=[
        {"key": t.a_key, "tenant": t.a, "role": "admin", "principal_id": "bc-alice"},
        {"key": t.b_key, "tenant": t.b, "role": "admin", "principal_id": "bc-bob"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
    yield t
    t.cleanup()


@pytest.mark.parametrize("query", [{"state": "SUCCEEDED"}, {}], ids=["state", "all"])
def test_a_job_list_reads_nothing_of_another_tenants_jobs(tenants: Tenants,
                                                          commands: Commands,
                                                          query: dict[str, str]) -> None:
    # Given 20 finished jobs of tenant A (one carrying a huge meta field), then 3,000
    # newer finished jobs of tenant B in the same state
    mine = tenants.jobs(tenants.a, 20, JobState.PENDING, meta={"labels_blob": HUGE},
                        path=[*RUNNING_PATH, JobState.SUCCEEDED])
    theirs = tenants.jobs(tenants.b, OTHER_JOBS, JobState.SUCCEEDED, at_once=25)
    # When A lists its jobs, 5 to a page
    body = tenants.list("/api/v1/jobs", commands, {**query, "limit": "5"})
    # Then the page is full: A's five newest, and a cursor to go on
    assert [i["id"] for i in body["items"]] == list(reversed(mine))[:5]
    assert isinstance(body["next_cursor"], str)
    # And no command named anything of B, nor read a whole meta
    assert commands.naming(tenants.b) == []
    assert [c for c in commands.sent if any(j in c for j in theirs)] == []
    assert commands.named("HGETALL") == []
    assert len(commands.sent) <= COMMANDS_PER_PAGE, len(commands.sent)


def test_an_approval_list_reads_nothing_of_another_tenants_jobs(tenants: Tenants,
                                                                commands: Commands) -> None:
    gated = {"safety_decision": "REQUIRE_APPROVAL", "safety_reason": "needs a person",
             "safety_rule_id": "rule-bc", "safety_approval_required": "true",
             "safety_checked_at": str(time.time_ns() // 1000)}
    # Given 3 jobs of A waiting for approval (with a huge field no list shows), then
    # 3,000 newer jobs of B waiting for approval
    mine = tenants.jobs(tenants.a, 3, JobState.APPROVAL_REQUIRED,
                        meta={**gated, "labels_blob": HUGE})
    theirs = tenants.jobs(tenants.b, OTHER_JOBS, JobState.APPROVAL_REQUIRED, meta=gated,
                          at_once=25)
    # When A lists the approvals, 2 to a page
    body = tenants.list("/api/v1/approvals", commands, {"limit": "2"})
    # Then the page is full: A's two newest, as ApprovalItems, and a cursor
    assert [i["job"]["id"] for i in body["items"]] == list(reversed(mine))[:2]
    assert body["items"][0]["job"]["tenant"] == tenants.a
    assert body["items"][0]["policy_rule_id"] == "rule-bc"
    assert isinstance(body["next_cursor"], str)
    # And no command named anything of B, nor read a whole meta (the huge field)
    assert commands.naming(tenants.b) == []
    assert [c for c in commands.sent if any(j in c for j in theirs)] == []
    assert commands.named("HGETALL") == []
    assert len(commands.sent) <= COMMANDS_PER_PAGE, len(commands.sent)
    # And the next page ends the list with A's last job
    rest = tenants.list("/api/v1/approvals", commands,
                        {"limit": "2", "cursor": body["next_cursor"]})
    assert [i["job"]["id"] for i in rest["items"]] == [mine[0]]
    assert commands.naming(tenants.b) == []


def test_a_terminal_index_expires_and_forgets_entries_older_than_a_meta(
        tenants: Tenants) -> None:
    redis = runtime.redis_client()
    key = index_key(JobState.SUCCEEDED)
    # Given an entry in the finished jobs' index older than any meta can live
    ghost = f"bc-ghost-{tenants.tag}"
    tenants.ids.append(ghost)
    old_us = (time.time_ns() // 1000) - (META_TTL_S + 3600) * 1_000_000
    runtime.run(redis.zadd(key, {ghost: old_us}))
    # When a job lands in that state
    (job_id,) = tenants.jobs(tenants.a, 1, JobState.PENDING,
                             path=[*RUNNING_PATH, JobState.SUCCEEDED])
    # Then the index holds the job, no longer the old entry, and expires with the metas
    assert runtime.run(redis.zscore(key, job_id)) is not None
    assert runtime.run(redis.zscore(key, ghost)) is None
    assert 0 < runtime.run(redis.ttl(key)) <= META_TTL_S
    # And so does the tenant's own index of that state
    tenant_key = jobs.tenant_index_key(tenants.a, JobState.SUCCEEDED)
    runtime.run(redis.zadd(tenant_key, {ghost: old_us}))
    (second,) = tenants.jobs(tenants.a, 1, JobState.RUNNING, path=[JobState.SUCCEEDED])
    members = {_text(m) for m in runtime.run(redis.zrange(tenant_key, 0, -1))}
    assert members == {job_id, second}
    assert 0 < runtime.run(redis.ttl(tenant_key)) <= META_TTL_S
    # And a tenant's index of an open state expires too (refreshed with each job)
    (waiting,) = tenants.jobs(tenants.a, 1, JobState.PENDING)
    pending_key = jobs.tenant_index_key(tenants.a, JobState.PENDING)
    assert runtime.run(redis.zscore(pending_key, waiting)) is not None
    assert 0 < runtime.run(redis.ttl(pending_key)) <= META_TTL_S
