"""The audit routes through the gateway, on the real Redis and NATS: a tenant's events
filtered and paged newest first, the scan bound, the read audited, verify (ok, a
tampered entry named by its seq, a trimmed chain seeded from its export mark) and the
legal hold set and cleared, audited."""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.gateway.audit import service as audit_service
from cordum.store.audit import AuditChain, AuditEntry, AuditEvent, parse_entry, stream_key
from cordum.store.audit_trail import exported_key, hold_key
from tests import helpers

HMAC_HEX = "ab" * 32
KEY = bytes.fromhex(HMAC_HEX)
ADMIN = "audit-admin-key"
READER = "audit-reader-key"
T0 = 1_767_225_600_000_000
"""2026-01-01T00:00:00Z in µs."""


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unique = unique
        self.tenant = f"at-{unique}"
        helpers.use_gateway(monkeypatch, [
            {"key": ADMIN, "tenant": self.tenant, "role": "admin", "principal_id": "ops"},
            {"key": READER, "tenant": self.tenant, "role": "audit.read",
             "principal_id": "auditor"}],
            unset=("CORDUM_AUDIT_HMAC_SECRET_ID",), CORDUM_AUDIT_HMAC_KEY=HMAC_HEX)

    @property
    def redis(self):  # type: ignore[no-untyped-def]
        return runtime.redis_client()

    def call(self, method: str, path: str, body=None, key: str = READER, query=None):  # type: ignore[no-untyped-def]
        status, answer, _ = helpers.call(helpers.event(method, path, body, key=key,
                                                       tenant=self.tenant, query=query))
        return status, answer

    def events(self, **query: object) -> dict:
        status, body = self.call("GET", "/api/v1/audit/events",
                                 query={k: str(v) for k, v in query.items()} or None)
        assert status == 200, body
        return body

    def seed(self, n: int, **over: object) -> None:
        """Events 1..n: types, severities, actors, jobs and times that differ."""
        async def go() -> None:
            chain = AuditChain(self.redis, KEY)
            for i in range(1, n + 1):
                fields: dict[str, object] = dict(
                    type=("job.submit", "job.cancel", "approval.approve")[i % 3],
                    severity=("HIGH", "INFO")[i % 2], tenant=self.tenant,
                    actor=("alice", "bob")[i % 2], actor_key="k", at=T0 + i * 1_000_000,
                    job_id=f"job-{i}", run_id=f"run-{i % 4}", reason=f"Reason {i}")
                fields.update(over)
                await chain.append(self.tenant, AuditEvent(**fields))  # type: ignore[arg-type]
        runtime.run(go())

    def entries(self) -> list[AuditEntry]:
        items = runtime.run(self.redis.xrange(stream_key(self.tenant)))
        return [parse_entry(sid, fields) for sid, fields in items]

    def decoded(self) -> list[dict]:
        return [e.decoded() for e in self.entries()]


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        try:
            yield a
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"audit:*{unique}*"))


def seqs(page: dict) -> list[int]:
    return [item["seq"] for item in page["items"]]


# --- events ------------------------------------------------------------------------------

def test_events_come_newest_first_with_seq_hash_and_time(api):
    api.seed(5)
    page = api.events()
    assert seqs(page) == [5, 4, 3, 2, 1]
    assert (page["returned"], page["next_cursor"]) == (5, None)
    first = page["items"][0]
    entry = api.entries()[4]
    assert first["hash"] == entry.hash and len(first["hash"]) == 64
    assert {k: first[k] for k in ("type", "actor", "job_id", "tenant")} == {
        "type": "approval.approve", "actor": "bob", "job_id": "job-5", "tenant": api.tenant}
    assert first["at"] == T0 + 5_000_000
    assert first["occurred_at"] == "2026-01-01T00:00:05Z"


def test_each_filter_narrows_the_page(api):
    api.seed(12)
    assert seqs(api.events(type="job.submit")) == [12, 9, 6, 3]
    assert seqs(api.events(type="job.*")) == [12, 10, 9, 7, 6, 4, 3, 1]
    assert seqs(api.events(type="job")) == []  # exact, not a prefix, without .*
    assert seqs(api.events(severity="high")) == [12, 10, 8, 6, 4, 2]
    assert seqs(api.events(actor="bob")) == [11, 9, 7, 5, 3, 1]
    assert seqs(api.events(job_id="job-7")) == [7]
    assert seqs(api.events(run_id="run-1")) == [9, 5, 1]
    assert seqs(api.events(**{"from": "2026-01-01T00:00:03Z", "to": "2026-01-01T00:00:05Z"})
                ) == [5, 4, 3]
    # (Each read so far appended an audit.read event of this moment: after 00:00:11.)
    assert seqs(api.events(**{"from": "2026-01-01T00:00:11Z", "to": "2026-01-02T00:00:00Z"})
                ) == [12, 11]
    assert seqs(api.events(to="2026-01-01T00:00:02Z")) == [2, 1]
    assert seqs(api.events(search="REASON 1")) == [12, 11, 10, 1]
    assert seqs(api.events(search="approval.app")) == [11, 8, 5, 2]
    assert seqs(api.events(type="job.*", actor="alice", severity="HIGH")) == [12, 10, 6, 4]


def test_pages_follow_next_cursor_to_the_oldest(api):
    api.seed(7)
    seen, cursor, pages = [], None, 0
    while True:
        page = api.events(limit=3, **({"cursor": cursor} if cursor else {}))
        seen += seqs(page)
        pages += 1
        cursor = page["next_cursor"]
        assert isinstance(cursor, str | None)
        if cursor is None:
            break
    assert seen == [7, 6, 5, 4, 3, 2, 1] and pages == 3
    # A filtered walk pages over what matches.
    first = api.events(limit=2, type="job.*")
    assert seqs(first) == [7, 6]
    assert seqs(api.events(limit=2, type="job.*", cursor=first["next_cursor"])) == [4, 3]


def test_a_scan_bound_hit_answers_a_short_page_with_a_cursor(api):
    # limit 1: batches of 4, at most 8 batches (32 entries) per page.
    api.seed(40, type="job.submit")
    api.seed(1, type="rare.event")  # seq 41
    page = api.events(limit=1, type="job.cancel")
    # Seqs 41 down to 10 read: go on below 10.
    assert (page["items"], page["next_cursor"]) == ([], str(41 - 32 + 1))
    rest = api.events(limit=1, type="job.cancel", cursor=page["next_cursor"])
    assert (rest["items"], rest["next_cursor"]) == ([], None)  # 9 entries left: all read
    assert seqs(api.events(limit=1, type="rare.event")) == [41]
    assert audit_service.SCAN_ROUNDS * audit_service.SCAN_FACTOR == 32


def test_extra_keys_that_name_a_secret_are_not_shown(api):
    api.seed(1, extra={"topic": "job.x", "api_key": "k1", "Password": "p", "authToken": "t",
                       "nested": {"private-key": "pk", "client_secret": "s", "ok": 1},
                       "list": [{"apiKey": "x", "keep": True}]})
    [item] = api.events()["items"]
    assert item["extra"] == {"topic": "job.x", "nested": {"ok": 1}, "list": [{"keep": True}]}
    # The chain keeps what it was given: only the view leaves it out.
    assert api.decoded()[0]["extra"]["api_key"] == "k1"


@pytest.mark.parametrize(("query", "code"), [
    ({"limit": "0"}, "INVALID_LIMIT"), ({"limit": "ten"}, "INVALID_LIMIT"),
    ({"limit": "-1"}, "INVALID_LIMIT"), ({"cursor": "abc"}, "INVALID_CURSOR"),
    ({"cursor": "0"}, "INVALID_CURSOR"), ({"cursor": "9" * 40}, "INVALID_CURSOR"),
    ({"from": "yesterday"}, "INVALID_FROM"), ({"to": "2026-13-01T00:00:00Z"}, "INVALID_TO"),
    ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "INVALID_RANGE"),
    ({"severity": "URGENT"}, "INVALID_SEVERITY"), ({"search": "x" * 257}, "INVALID_FILTER"),
])
def test_bad_query_values_are_400_with_their_code(api, query, code):
    status, body = api.call("GET", "/api/v1/audit/events", query=query)
    assert (status, body["code"]) == (400, code), body


def test_a_limit_over_200_is_clamped(api):
    api.seed(3)
    assert api.events(limit=5000)["returned"] == 3


# --- the read is audited -----------------------------------------------------------------

def test_each_read_appends_an_audit_read_event_of_the_caller(api):
    api.seed(2)
    page = api.events(type="job.*", limit=10)
    assert seqs(page) == [1]  # the read's own event comes after the page
    read = api.decoded()[-1]
    assert (read["type"], read["severity"], read["tenant"], read["actor"]) == (
        "audit.read", "INFO", api.tenant, "auditor")
    assert len(read["actor_key"]) == 12
    assert read["extra"]["filters"] == {"type": "job.*"}
    assert (read["extra"]["returned"], read["extra"]["limit"]) == (1, 10)
    # The next read sees the first one.
    assert api.events(limit=1)["items"][0]["type"] == "audit.read"


def test_a_read_that_cannot_be_recorded_is_not_served(api, monkeypatch):
    api.seed(1)

    async def refuse(self, event):  # type: ignore[no-untyped-def]
        from cordum.store.errors import StoreError
        raise StoreError("down")

    monkeypatch.setattr("cordum.store.audit_trail.AuditTrail.record", refuse)
    status, body = api.call("GET", "/api/v1/audit/events")
    assert (status, body["code"]) == (503, "store_unavailable")


# --- verify ------------------------------------------------------------------------------

def test_verify_of_an_untouched_chain_is_ok_and_audited(api):
    api.seed(4)
    status, body = api.call("GET", "/api/v1/audit/verify")
    assert status == 200, body
    assert {k: body[k] for k in ("status", "total_events", "verified_events", "first_seq",
                                 "last_seq", "gaps", "hmac_verified", "tenant",
                                 "exported_through_seq")} == {
        "status": "ok", "total_events": 4, "verified_events": 4, "first_seq": 1,
        "last_seq": 4, "gaps": [], "hmac_verified": True, "tenant": api.tenant,
        "exported_through_seq": None}
    last = api.decoded()[-1]
    assert (last["type"], last["actor"], last["extra"]["status"]) == (
        "audit.verify", "auditor", "ok")
    # The verify event is itself part of the chain the next check passes.
    status, again = api.call("GET", "/api/v1/audit/verify")
    assert (again["status"], again["total_events"]) == ("ok", 5)


def test_verify_names_a_tampered_entry_by_its_seq(api):
    api.seed(4)
    entries = api.entries()

    async def rewrite() -> None:  # as someone with write access to Redis could
        key = stream_key(api.tenant)
        await api.redis.delete(key)
        for e in entries:
            event = e.event.replace(b"Reason 3", b"Reason 9") if e.seq == "3" else e.event
            await api.redis.xadd(key, {"seq": e.seq, "prev": e.prev, "hash": e.hash,
                                       "hmac": e.hmac or "", "event": event}, id=e.stream_id)

    runtime.run(rewrite())
    status, body = api.call("GET", "/api/v1/audit/verify")
    assert status == 200
    assert body["status"] == "compromised"
    assert body["gaps"] == [{"at_seq": 3, "type": "hash_mismatch"},
                            {"at_seq": 3, "type": "hmac_mismatch"}]
    assert (body["verified_events"], body["hmac_verified"]) == (3, False)


def test_verify_of_a_chain_trimmed_below_its_export_mark_starts_from_the_mark(api):
    api.seed(6)
    entries = api.entries()
    runtime.run(api.redis.set(exported_key(api.tenant), f"3:{entries[2].hash}"))
    runtime.run(api.redis.xdel(stream_key(api.tenant), "1-1", "2-1", "3-1"))
    status, body = api.call("GET", "/api/v1/audit/verify")
    assert (body["status"], body["exported_through_seq"], body["first_seq"],
            body["gaps"], body["exported"]) == ("partial", 3, 4, [], None)
    # Trimmed past the mark: what was neither exported nor kept is missing.
    runtime.run(api.redis.xdel(stream_key(api.tenant), "4-1"))
    status, body = api.call("GET", "/api/v1/audit/verify")
    assert (body["status"], body["gaps"]) == ("compromised", [{"at_seq": 4, "type": "missing"}])


def test_verify_of_a_chain_trimmed_without_a_mark_is_compromised(api):
    api.seed(3)
    runtime.run(api.redis.xdel(stream_key(api.tenant), "1-1"))
    status, body = api.call("GET", "/api/v1/audit/verify")
    assert (body["status"], body["gaps"][0]) == ("compromised", {"at_seq": 1, "type": "missing"})


# --- the hold ----------------------------------------------------------------------------

def test_hold_set_read_and_cleared_each_change_audited(api):
    status, body = api.call("GET", "/api/v1/audit/hold")
    assert (status, body) == (200, {"tenant": api.tenant, "held": False})
    status, body = api.call("PUT", "/api/v1/audit/hold", {"reason": "  case 42  "}, key=ADMIN)
    assert status == 200, body
    assert (body["held"], body["by"], body["reason"]) == (True, "ops", "case 42")
    assert body["at"].endswith("Z")
    stored = json.loads(runtime.run(api.redis.get(hold_key(api.tenant))))
    assert stored == {"by": "ops", "at": body["at"], "reason": "case 42"}
    assert api.call("GET", "/api/v1/audit/hold")[1] == {k: body[k] for k in body}

    status, cleared = api.call("DELETE", "/api/v1/audit/hold", key=ADMIN)
    assert (status, cleared) == (200, {"tenant": api.tenant, "held": False, "cleared": True})
    assert runtime.run(api.redis.exists(hold_key(api.tenant))) == 0
    status, again = api.call("DELETE", "/api/v1/audit/hold", key=ADMIN)
    assert again["cleared"] is False

    kinds = [(e["type"], e["severity"], e["actor"]) for e in api.decoded()]
    assert kinds == [("audit.hold.set", "HIGH", "ops"), ("audit.hold.clear", "HIGH", "ops"),
                     ("audit.hold.clear", "HIGH", "ops")]
    first_clear = api.decoded()[1]
    assert first_clear["snapshot"]["reason"] == "case 42"
    assert api.decoded()[0]["reason"] == "case 42"
    # The outbox the transactions staged in is drained.
    assert runtime.run(api.redis.exists(f"audit:outbox:{api.tenant}")) == 0


def test_a_hold_change_takes_an_admin(api):
    status, body = api.call("PUT", "/api/v1/audit/hold", {"reason": "x"}, key=READER)
    assert (status, body["code"]) == (403, "forbidden")
    status, body = api.call("DELETE", "/api/v1/audit/hold", key=READER)
    assert (status, body["code"]) == (403, "forbidden")
    assert runtime.run(api.redis.exists(hold_key(api.tenant))) == 0
    assert api.entries() == []


def test_a_hold_body_that_is_not_json_is_400(api):
    status, body = api.call("PUT", "/api/v1/audit/hold", "{", key=ADMIN)
    assert status == 400
    status, body = api.call("PUT", "/api/v1/audit/hold", {"reason": ["x"]}, key=ADMIN)
    assert status == 400
    status, body = api.call("PUT", "/api/v1/audit/hold", "x" * 20_000, key=ADMIN)
    assert (status, body["code"]) == (400, "request_body_too_large")
