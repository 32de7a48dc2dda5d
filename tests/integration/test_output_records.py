"""The output checks' one read and one record write of a result, on the real Redis.

Each is a single script call where a pipeline of two or three commands was: the
read must give what the pipeline gave, a failed read an empty prefetch, and the
record write must leave the job's state, events and indexes alone (only a
quarantine moves a state, through the transition script and its fences).
"""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format

from cordum import protocol
from cordum.scheduler import output_prefetch
from cordum.scheduler.output_prefetch import PREFETCH_BYTES, prefetch
from cordum.store.errors import StoreError
from cordum.store.jobs import JobStore, NewJob, events_key, index_key, meta_key, request_key
from cordum.store.output_records import OutputRecords
from cordum.store.results import DECISION_TTL_S, decision_key
from tests.conftest import REDIS_URL


@pytest.fixture
def world(aloop, unique):
    redis = aioredis.Redis.from_url(REDIS_URL)
    job_id = f"test-outrec-{unique}"
    yield aloop, redis, OutputRecords(redis), job_id

    async def cleanup():
        keys = await redis.keys(f"*{job_id}*")
        if keys:
            await redis.delete(*keys)
        for key in (index_key("PENDING"), index_key("SUCCEEDED"), "job:recent"):
            await redis.zrem(key, job_id)
        await redis.aclose()

    aloop.run_until_complete(cleanup())


def stored_request(req: protocol.JobRequest) -> str:
    return json_format.MessageToJson(req, indent=None)


def test_prefetch_reads_request_size_and_head_in_one_call(world):
    loop, redis, records, job_id = world
    req = protocol.JobRequest(job_id=job_id, topic="job.mask", tenant_id="acme")
    req.labels["content_type"] = "text/plain"
    body = b"x" * (PREFETCH_BYTES + 10)

    async def scenario():
        await redis.set(request_key(job_id), stored_request(req), ex=60)
        await redis.set(protocol.result_key(job_id), body, ex=60)
        return await prefetch(records, job_id, protocol.pointer(protocol.result_key(job_id)))

    pre = loop.run_until_complete(scenario())
    assert pre.asked() == ("job.mask", "acme", {"content_type": "text/plain"})
    assert pre.size == len(body) and pre.head == body[:PREFETCH_BYTES]
    assert pre.content is None  # past the head: the content check reads the rest itself
    assert pre.request == req


def test_prefetch_without_result_or_request(world):
    loop, redis, records, job_id = world
    pre = loop.run_until_complete(prefetch(records, job_id, ""))
    assert (pre.raw_request, pre.size, pre.head) == (None, 0, None)
    assert pre.asked() == ("unknown", "", {}) and pre.request is None
    missing = loop.run_until_complete(
        prefetch(records, job_id, protocol.pointer(protocol.result_key(job_id))))
    assert missing.missing and missing.content is None


def test_failed_prefetch_is_empty_not_an_error(world):
    loop, redis, records, job_id = world

    class Broken:
        async def read(self, *args):
            raise ConnectionError("connection reset")

    pre = loop.run_until_complete(prefetch(Broken(), job_id, "redis://res:x"))  # type: ignore[arg-type]
    assert (pre.raw_request, pre.size, pre.head) == (None, 0, None)
    assert pre.asked() == ("unknown", "", {})


@pytest.mark.parametrize("doc", [
    {"topic": "job.a", "tenantId": "t1", "labels": {"k": "v"}},
    {"topic": "job.a", "tenant_id": "t1"},
    {"topic": "job.a", "env": {"tenant_id": "from-env"}},
    {"topic": "", "labels": {}},
    {},
    {"topic": "job.a", "tenantId": "t1", "priority": "JOB_PRIORITY_CRITICAL", "extra": 1},
    {"topic": 5},
    {"topic": "job.a", "labels": {"k": 1}},
    {"topic": "job.a", "tenantId": "t1", "tenant_id": "t2"},
    {"topic": None, "tenantId": "t1"},
    {"topic": "job.a", "labels": None},
    ["not", "an", "object"],
])
def test_plain_reading_of_the_request_agrees_with_the_protojson_parse(doc):
    """The checks' topic, tenant and labels are what the parse of the whole JobRequest
    gives (topic "unknown" and no tenant when it does not parse)."""
    raw = json.dumps(doc).encode()
    req = output_prefetch._parse(raw)
    expected = ("unknown", "", ()) if req is None else (
        req.topic or "unknown", req.tenant_id or req.env.get("tenant_id", "") or "default",
        tuple(req.labels.items()))
    assert output_prefetch._asked("j", raw) == expected


def test_unreadable_request_is_checked_as_unknown(world):
    loop, redis, records, job_id = world

    async def scenario():
        await redis.set(request_key(job_id), b"\xff{not json", ex=60)
        return await prefetch(records, job_id, "")

    pre = loop.run_until_complete(scenario())
    assert pre.asked() == ("unknown", "", {}) and pre.request is None


def test_decision_record_writes_fields_and_records_and_moves_nothing(world):
    loop, redis, records, job_id = world
    store = JobStore(redis)

    async def scenario():
        await store.create(NewJob(job_id=job_id, trace_id=job_id, tenant=job_id, topic="job.a",
                                  context="{}", request="{}", meta={}))
        await store.transition(job_id, ["SUCCEEDED"], fields={"result_ptr": "p"})
        before = (await store.get(job_id), await redis.lrange(events_key(job_id), 0, -1),
                  await redis.zscore(index_key("SUCCEEDED"), job_id))
        record = '{"decision":"ALLOW","phase":"async"}'
        await records.record(job_id, {"output_safety": record, "output_decision": "ALLOW"},
                             {decision_key(job_id): (record, DECISION_TTL_S)})
        after = (await store.get(job_id), await redis.lrange(events_key(job_id), 0, -1),
                 await redis.zscore(index_key("SUCCEEDED"), job_id))
        ttl = await redis.ttl(decision_key(job_id))
        stored = await redis.get(decision_key(job_id))
        return before, after, ttl, stored, record

    before, after, ttl, stored, record = loop.run_until_complete(scenario())
    meta_before, meta_after = before[0], after[0]
    assert meta_after.pop("output_safety") == record
    assert meta_after.pop("output_decision") == "ALLOW"
    assert meta_after == meta_before and meta_after["state"] == "SUCCEEDED"
    assert after[1:] == before[1:]  # no event appended, the index entry untouched
    assert stored.decode() == record and 0 < ttl <= DECISION_TTL_S


def test_decision_record_failure_is_a_store_error(world):
    loop, redis, records, job_id = world

    async def scenario():
        await redis.set(meta_key(job_id), "not a hash", ex=60)  # HSET then fails
        await records.record(job_id, {"output_decision": "ALLOW"}, {})

    with pytest.raises(StoreError):
        loop.run_until_complete(scenario())
