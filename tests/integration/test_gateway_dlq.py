"""DLQ API on the real Redis and NATS.

Entries are made the way production makes them: a stored job fails through the
engine's result path, whose transition script writes the DLQ entry.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import nats
import pytest
from google.protobuf import json_format

from cordum import config, protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.gateway.core import deps
from cordum.registry.reader import SnapshotReader
from cordum.scheduler.engine import Engine
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore, NewJob
from cordum.store.locks import JobLocks
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

ADMIN, VIEWER, OUTSIDER = "dlq-admin", "dlq-viewer", "dlq-outsider"

class Api:
    def __init__(self, unique: str, monkeypatch) -> None:
        self.unique = unique
        self.tenant = f"t-{unique}"
        self.other_tenant = f"o-{unique}"
        self.jobs: list[str] = []
        keys = [
            {"key": ADMIN, "tenant": self.tenant, "role": "admin", "principal_id": "bob"},
            {"key": VIEWER, "tenant": self.tenant, "role": "user"},
            {"key": OUTSIDER, "tenant": self.other_tenant, "role": "admin"},
        ]
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys))
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        config.settings.cache_clear()
        deps.reset()
        self.redis = runtime.redis_client()
        self.store = JobStore(self.redis)
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        # Only the result path is used: no kernel, no worker needed.
        self.engine = Engine(
            store=self.store,
            registry=SnapshotReader(self.redis, key=f"test:snapshot:{unique}", max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(topics={}, pools={})),
            safety=None,  # type: ignore[arg-type]
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
        )

    def call(self, method: str, path: str, key: str | None = ADMIN,
             query: dict | None = None) -> tuple[int, object]:
        """The gateway's status and body for a request with ``key``, in that key's tenant."""
        tenant = self.other_tenant if key == OUTSIDER else self.tenant
        status, body, _ = helpers.call(helpers.event(method, path, key=key, tenant=tenant,
                                                     query=query, content_type=None))
        return status, body

    def failed_job(self, n: int = 0, topic: str = "job.default", tenant: str | None = None,
                   ) -> str:
        """A stored job that failed on its worker: its DLQ entry is written by the store."""
        tenant = tenant or self.tenant
        job_id = f"dlq-{self.unique}-{n}"
        req = protocol.JobRequest(
            job_id=job_id, topic=topic, tenant_id=tenant, principal_id="alice", priority=2,
            context_ptr=protocol.pointer(protocol.context_key(job_id)),
            env={"tenant_id": tenant},
            labels={"team": "blue", "approval_granted": "true",
                    "cordum.bus_msg_id": f"approval:{job_id}"},
        )
        req.budget.max_output_tokens = 77
        job = NewJob(job_id=job_id, trace_id=f"tr-{job_id}", tenant=tenant, topic=topic,
                     context=json.dumps({"prompt": f"p{n}"}),
                     request=json_format.MessageToJson(req, indent=None),
                     meta={"principal": "alice", "team": "core", "capability": "echo",
                           "worker_id": "w1"})  # dispatched to w1, which reports below
        assert runtime.run(self.store.create(job))
        self.jobs.append(job_id)
        res = protocol.JobResult(job_id=job_id, status=protocol.JobStatus.JOB_STATUS_FAILED,
                                 worker_id="w1", error_code="worker_crashed",
                                 error_message=f"boom {n}")
        packet = protocol.packet(trace_id=job.trace_id, sender_id="w1", job_result=res)
        outcome = runtime.run(self.engine.handle_result(packet.SerializeToString()))
        assert (outcome.action, outcome.state) == ("recorded", "FAILED")
        return job_id

    def entry(self, job_id: str) -> dict | None:
        raw = runtime.run(self.redis.get(f"dlq:entry:{job_id}"))
        return None if raw is None else json.loads(raw)

    def indexed(self, job_id: str) -> bool:
        return runtime.run(self.redis.zscore("dlq:index", job_id)) is not None

    def cleanup(self) -> None:
        async def forget() -> None:
            # The job ids carry the test's tag: its keys go first, then the jobs leave
            # the indexes as tombstones.
            await helpers.delete_keys(self.redis, f"*{self.unique}*")
            await helpers.forget_jobs(self.redis, self.jobs)

        runtime.run(forget())


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        yield a
        a.cleanup()


def test_dlq_needs_a_key_and_the_admin_role(api):
    job_id = api.failed_job()
    for method, path in [("GET", "/api/v1/dlq"), ("GET", "/api/v1/dlq/page"),
                         ("DELETE", f"/api/v1/dlq/{job_id}"),
                         ("POST", f"/api/v1/dlq/{job_id}/retry")]:
        status, err = api.call(method, path, key=None)
        assert (status, err["code"]) == (401, "unauthorized")
        status, err = api.call(method, path, key=VIEWER)
        assert (status, err["code"]) == (403, "forbidden")
    assert api.entry(job_id) is not None


def test_list_is_a_bare_array_of_the_tenants_entries_newest_first(api):
    ids = [api.failed_job(n) for n in range(3)]
    foreign = api.failed_job(9, tenant=api.other_tenant)
    status, entries = api.call("GET", "/api/v1/dlq")
    assert status == 200 and isinstance(entries, list)
    assert [e["job_id"] for e in entries] == list(reversed(ids))
    assert foreign not in [e["job_id"] for e in entries]
    first = entries[-1]
    assert first["topic"] == "job.default"  # from the job's meta: the result path omits it
    assert first["tenant"] == api.tenant
    assert (first["error"], first["reason"]) == ("boom 0", "boom 0")
    assert (first["status"], first["reason_code"]) == ("FAILED", "worker_crashed")
    assert first["original_state"] == first["last_state"] == "PENDING"
    assert (first["retry_count"], first["attempts"]) == (0, 0)
    assert first["failed_at"].endswith("Z") and datetime.fromisoformat(first["failed_at"])
    status, two = api.call("GET", "/api/v1/dlq", query={"limit": "2"})
    assert [e["job_id"] for e in two] == list(reversed(ids))[:2]
    status, theirs = api.call("GET", "/api/v1/dlq", key=OUTSIDER)
    assert [e["job_id"] for e in theirs] == [foreign]


def test_page_follows_string_cursors_to_the_end(api):
    ids = [api.failed_job(n) for n in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page = api.call("GET", "/api/v1/dlq/page", query=query)
        assert status == 200 and set(page) == {"items", "next_cursor"}
        assert len(page["items"]) <= 2
        seen += [e["job_id"] for e in page["items"]]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert seen == list(reversed(ids)) and pages >= 3


def test_delete_removes_the_entry_once(api):
    job_id = api.failed_job()
    status, err = api.call("DELETE", f"/api/v1/dlq/{job_id}", key=OUTSIDER)
    assert (status, err["code"]) == (403, "tenant_access_denied")
    assert api.entry(job_id) is not None
    status, body = api.call("DELETE", f"/api/v1/dlq/{job_id}")
    assert (status, body) == (204, "")
    assert api.entry(job_id) is None and not api.indexed(job_id)
    status, err = api.call("DELETE", f"/api/v1/dlq/{job_id}")
    assert (status, err) == (404, {"error": "dlq entry not found", "code": "dlq_entry_not_found",
                                   "status": 404})


def test_retry_submits_a_new_pending_job_and_removes_the_entry(api):
    # No worker serves job.echo.late: a running stack that consumes sys.job.submit
    # too leaves the retry waiting instead of running it.
    job_id = api.failed_job(topic="job.echo.late")

    async def sub():
        nc = await nats.connect(NATS_URL)
        return nc, await nc.subscribe(protocol.SUBJECT_SUBMIT)

    nc, submits = runtime.run(sub())
    status, body = api.call("POST", f"/api/v1/dlq/{job_id}/retry")
    assert status == 200, body
    new_id = body["job_id"]
    api.jobs.append(new_id)
    assert re.fullmatch(rf"{re.escape(job_id)}-retry-[0-9a-f]{{8}}", new_id)

    events = runtime.run(api.redis.lrange(f"job:events:{new_id}", 0, 0))
    assert json.loads(events[0])["state"] == "PENDING"  # stored PENDING
    meta = runtime.run(api.store.get(new_id))
    assert meta["tenant"] == api.tenant
    assert meta["topic"] == "job.echo.late" and meta["trace_id"] == f"dlq-retry-{job_id}"
    assert (meta["retry_of_job"], meta["principal"], meta["team"]) == (job_id, "bob", "core")
    req = runtime.run(JobIndexes(api.redis).get_request(new_id))
    assert req.job_id == new_id and req.topic == "job.echo.late" and req.tenant_id == api.tenant
    assert req.labels["retry"] == "true" and req.labels["retry_of_job"] == job_id
    assert req.labels["team"] == "blue" and req.env["retry_of_job"] == job_id
    assert req.env["tenant_id"] == api.tenant and req.env["team_id"] == "core"
    # A retry is judged afresh: the failed run's approval does not carry over.
    assert "approval_granted" not in req.labels and "cordum.bus_msg_id" not in req.labels
    assert req.priority == 2 and req.budget.max_output_tokens == 77
    assert req.context_ptr == f"redis://ctx:{new_id}"
    copied = runtime.run(api.redis.get(f"ctx:{new_id}"))
    assert json.loads(copied) == {"prompt": "p0"}

    async def announced():
        while True:
            msg = await submits.next_msg(timeout=5)
            decoded = protocol.decode(msg.data)
            if decoded.kind == "job_request" and decoded.packet.job_request.job_id == new_id:
                await nc.close()
                return msg, decoded.packet

    msg, packet = runtime.run(announced())
    assert msg.headers["Nats-Msg-Id"] == new_id
    assert packet.trace_id == f"dlq-retry-{job_id}"
    assert packet.sender_id == protocol.SENDER_GATEWAY
    assert packet.job_request.labels["retry"] == "true"

    assert api.entry(job_id) is None and not api.indexed(job_id)
    status, err = api.call("POST", f"/api/v1/dlq/{job_id}/retry")
    assert (status, err["code"]) == (404, "dlq_entry_not_found")


def test_retry_of_another_tenants_or_an_unknown_entry(api):
    job_id = api.failed_job()
    status, err = api.call("POST", f"/api/v1/dlq/{job_id}/retry", key=OUTSIDER)
    assert (status, err["code"]) == (403, "tenant_access_denied")
    assert api.entry(job_id) is not None
    status, err = api.call("POST", f"/api/v1/dlq/nope-{api.unique}/retry")
    assert (status, err["code"]) == (404, "dlq_entry_not_found")


def test_retry_without_a_topic_is_400(api):
    job_id = api.failed_job(topic="")
    status, err = api.call("POST", f"/api/v1/dlq/{job_id}/retry")
    assert status == 400 and err["error"] == "missing topic for retry"
    assert api.entry(job_id) is not None


def test_an_entry_whose_job_is_gone_is_shown_to_no_one(api):
    job_id = api.failed_job()
    runtime.run(api.redis.delete(f"job:meta:{job_id}"))  # meta lives 7 days, entries 30
    status, entries = api.call("GET", "/api/v1/dlq")
    assert job_id not in [e["job_id"] for e in entries]
    status, err = api.call("DELETE", f"/api/v1/dlq/{job_id}")
    assert (status, err["code"]) == (404, "dlq_entry_not_found")


def test_pages_neither_lose_nor_repeat_entries_with_equal_scores(api):
    from cordum.gateway.core.paging import page_newest_first, parse_cursor

    key = f"test:index:{api.unique}"
    members = {f"m{i}": 1000 + i // 3 for i in range(8)}  # scores 1000, 1000, 1000, 1001, ...
    runtime.run(api.redis.zadd(key, members))

    async def everything(limit: int) -> list[str]:
        async def views(rows):
            return [member for member, _ in rows]

        seen, cursor = [], ""
        for _ in range(len(members) + 1):  # a cursor that stops moving fails, not hangs
            items, nxt = await page_newest_first(api.redis, key, parse_cursor(cursor), limit,
                                                 views)
            seen += items
            if nxt is None:
                return seen
            cursor = nxt
        raise AssertionError(f"no end after {len(members) + 1} pages: {seen}")

    for limit in (1, 2, 3, 5):
        seen = runtime.run(everything(limit))
        assert sorted(seen) == sorted(members) and len(seen) == len(members), limit
        assert [members[m] for m in seen] == sorted(members.values(), reverse=True)
