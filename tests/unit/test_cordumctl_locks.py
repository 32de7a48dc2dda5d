"""cordumctl's lock commands against a stub API: what each sends, what it prints, the
exit code of each refusal, and ``acquire --wait`` asking again while the lock is held."""

from __future__ import annotations

import pytest

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

LOCKS = "/api/v1/locks"
ACQUIRE, RENEW, RELEASE = f"{LOCKS}/acquire", f"{LOCKS}/renew", f"{LOCKS}/release"
ADMIN = "/api/v1/admin/locks"


def lock(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "resource": "deploy/prod", "mode": "EXCLUSIVE", "owners": ["agent-1"],
        "updated_at": "2026-01-01T00:00:00Z", "expires_at": "2999-01-01T00:00:30Z",
        "fencing_token": 42}
    base.update(over)
    return base


BUSY = error(409, "lock unavailable", "lock_unavailable", retryable=True,
             retry_after_ms=2500, retry_after=3)


def test_get_sends_the_resource_and_prints_the_lock() -> None:
    api = StubApi().on("GET", LOCKS, reply(200, lock(owners=["a", "b"], mode="SHARED")))
    out = run_cli(api, "-o", "table", "locks", "get", "deploy/prod").out
    [sent] = api.sent("GET", LOCKS)
    assert dict(sent.url.params) == {"resource": "deploy/prod"}
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["RESOURCE"].split()[1] == "deploy/prod"
    assert lines["MODE"].split()[1] == "SHARED"
    assert "a, b" in lines["OWNERS"]
    assert "42" in lines["FENCING"]
    assert "2999-01-01T00:00:30Z (in" in lines["EXPIRES"]


def test_get_of_a_free_lock_exits_not_found() -> None:
    api = StubApi().on("GET", LOCKS, error(404, "lock not found", "lock_not_found"))
    result = run_cli(api, "locks", "get", "nothing")
    assert result.code == ExitCode.NOT_FOUND and "lock not found" in result.err


@pytest.mark.parametrize(("args", "sent"), [
    ([], {"mode": "EXCLUSIVE"}),
    (["--ttl", "30s"], {"mode": "EXCLUSIVE", "ttl_ms": 30_000}),
    (["--ttl", "1500ms", "--shared"], {"mode": "SHARED", "ttl_ms": 1_500}),
    (["--ttl", "1h"], {"mode": "EXCLUSIVE", "ttl_ms": 3_600_000}),
])
def test_acquire_sends_owner_mode_and_ttl(args: list[str], sent: dict[str, object]) -> None:
    api = StubApi().on("POST", ACQUIRE, reply(200, lock(owner="agent-1")))
    result = run_cli(api, "locks", "acquire", "deploy/prod", "--owner", "agent-1", *args)
    assert result.code == 0, result.err
    assert api.body("POST", ACQUIRE) == {"resource": "deploy/prod", "owner": "agent-1", **sent}
    assert result.json()["fencing_token"] == 42


def test_acquire_of_a_held_lock_exits_conflict_at_once() -> None:
    api = StubApi().on("POST", ACQUIRE, BUSY)
    result = run_cli(api, "locks", "acquire", "r", "--owner", "o")
    assert result.code == ExitCode.CONFLICT and "lock unavailable" in result.err
    assert len(api.sent("POST", ACQUIRE)) == 1 and result.sleeps == []


def test_acquire_wait_asks_again_until_the_lock_is_free() -> None:
    api = StubApi().on("POST", ACQUIRE, BUSY, BUSY, reply(200, lock()))
    result = run_cli(api, "locks", "acquire", "r", "--owner", "o", "--wait", "10s")
    assert result.code == 0, result.err
    assert len(api.sent("POST", ACQUIRE)) == 3 and result.sleeps == [1.0, 1.0]


def test_acquire_wait_gives_up_at_its_deadline() -> None:
    api = StubApi().on("POST", ACQUIRE, BUSY)
    result = run_cli(api, "locks", "acquire", "r", "--owner", "o", "--wait", "2500ms")
    assert result.code == ExitCode.CONFLICT
    assert result.sleeps == [1.0, 1.0, 0.5]


def test_acquire_wait_does_not_retry_other_refusals() -> None:
    api = StubApi().on("POST", ACQUIRE, error(409, "too many owners", "too_many_owners"))
    result = run_cli(api, "locks", "acquire", "r", "--owner", "o", "--wait", "10s")
    assert result.code == ExitCode.CONFLICT and result.sleeps == []


def test_a_bad_ttl_is_a_usage_error_before_any_call() -> None:
    api = StubApi()
    for ttl in ("soon", "0s"):
        result = run_cli(api, "locks", "acquire", "r", "--owner", "o", "--ttl", ttl)
        assert result.code == ExitCode.USAGE, ttl
    assert api.requests == []
    assert run_cli(api, "locks", "acquire", "r").code == ExitCode.USAGE  # --owner required


def test_renew_sends_the_ttl_and_prints_the_hold() -> None:
    api = StubApi().on("POST", RENEW, reply(200, lock(owner="o",
                                                      owner_expires_at="2999-01-01T00:01:00Z")))
    out = run_cli(api, "-o", "table", "locks", "renew", "r", "--owner", "o", "--ttl", "1m").out
    assert api.body("POST", RENEW) == {"resource": "r", "owner": "o", "ttl_ms": 60_000}
    assert "MY HOLD EXPIRES" in out and "2999-01-01T00:01:00Z" in out


def test_renew_of_a_hold_that_is_gone_exits_not_found() -> None:
    api = StubApi().on("POST", RENEW, error(404, "lock not held", "lock_not_held"))
    assert run_cli(api, "locks", "renew", "r", "--owner", "o").code == ExitCode.NOT_FOUND


def test_release_sends_resource_and_owner_and_says_what_is_left() -> None:
    api = StubApi().on("POST", RELEASE,
                       reply(200, {"lock": lock(owners=[]), "released": True}),
                       reply(200, {"lock": lock(owners=["b"], mode="SHARED"), "released": True}))
    out = run_cli(api, "-o", "table", "locks", "release", "r", "--owner", "a").out
    assert api.body("POST", RELEASE) == {"resource": "r", "owner": "a"}
    assert out.strip() == "released r"
    out = run_cli(api, "-o", "table", "locks", "release", "r", "--owner", "a").out
    assert "1 owner(s) still share it" in out
    assert run_cli(api, "locks", "release", "r", "--owner", "a").json()["released"] is True


@pytest.mark.parametrize(("status", "code", "exit_code"), [
    (409, "lock_not_held", ExitCode.CONFLICT),
    (403, "lock_owner_mismatch", ExitCode.AUTH),
    (403, "forbidden", ExitCode.AUTH),
])
def test_release_refusals_exit_with_their_code(status: int, code: str,
                                               exit_code: ExitCode) -> None:
    api = StubApi().on("POST", RELEASE, error(status, "refused", code))
    assert run_cli(api, "locks", "release", "r", "--owner", "a").code == exit_code


def test_list_prints_the_tenants_locks() -> None:
    api = StubApi().on("GET", ADMIN, reply(200, {"locks": [
        {"key": "a", "holder": "w-a", "ttl_remaining_ms": 12_000, "type": "resource",
         "mode": "SHARED", "owner_count": 3, "fencing_token": 7}]}))
    out = run_cli(api, "-o", "table", "locks", "list").out
    header, row = out.splitlines()[:2]
    assert header.split() == ["RESOURCE", "MODE", "HOLDER", "OWNERS", "FENCING", "TOKEN", "TTL"]
    assert row.split() == ["a", "SHARED", "w-a", "3", "7", "12.0s"]
    empty = StubApi().on("GET", ADMIN, reply(200, {"locks": []}))
    assert "no locks held" in run_cli(empty, "-o", "table", "locks", "list").out
