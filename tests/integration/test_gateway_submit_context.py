"""What a submit reads before the policy is asked, through the gateway on the real Redis,
NATS and safety kernel: a config document of the job's team is merged into the effective
config the job carries and the kernel applies; a topic's registered input schema refuses
a submit with the path of what is wrong; and neither costs a round trip of its own while
the rate limiter's pipeline carries the reads (``cordum.gateway.jobs.submit_reads``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from cordum import runtime
from tests.conftest import REDIS_URL
from tests.integration.test_gateway_remediation import (
    RemediationGateway,
    remediation_gateway,
    remediation_kernel,
)

SENT: list[bytes] = []


class CountingConnection(Connection):
    """Counts the requests written to Redis (a pipeline or a script call is one)."""

    async def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        SENT.append(bytes(command[0] if isinstance(command, list) else command)[:40])
        return await super().send_packed_command(command, check_health)


@pytest.fixture(scope="module")
def served(tmp_path_factory):  # type: ignore[no-untyped-def]
    with remediation_kernel(tmp_path_factory) as pair:
        yield pair


@pytest.fixture
def gw(unique, served, monkeypatch) -> Iterator[RemediationGateway]:  # type: ignore[no-untyped-def]
    config_dir, addr = served
    with remediation_gateway(unique, config_dir, addr, monkeypatch) as g:
        yield g


def team(gw: RemediationGateway) -> str:
    return f"blue-{gw.unique}"


def put_team_config(gw: RemediationGateway, data: dict) -> None:
    status, out = gw.call("PUT", "/api/v1/config",
                          {"scope": "team", "scope_id": team(gw), "data": data}, role="admin")
    assert status == 204, out


def test_a_team_document_is_in_the_job_and_the_kernel_applies_it(gw):
    put_team_config(gw, {"region": "eu", "safety": {"denied_topics": ["job.remedy.safe"]}})

    status, out, _ = gw.submit({"prompt": "hello", "team_id": team(gw)})
    assert status == 200, out
    status, job = gw.call("GET", f"/api/v1/jobs/{out['job_id']}", role="admin")
    assert status == 200, job
    carried = job["effective_config"]
    assert carried["data"] == {"region": "eu",
                               "safety": {"denied_topics": ["job.remedy.safe"]}}
    assert carried["version"].startswith("system:0|org:0|team:1")

    # The same topic is allowed without the team, denied with it, by the config's rule.
    status, out, _ = gw.submit({"prompt": "x", "topic": "job.remedy.safe"})
    assert status == 200, out
    status, out, _ = gw.submit({"prompt": "x", "topic": "job.remedy.safe",
                                "team_id": team(gw)})
    assert (status, out["code"]) == (403, "safety_denied"), out
    assert "denied by effective config" in out["error"]
    status, job = gw.call("GET", f"/api/v1/jobs/{out['job_id']}", role="admin")
    assert job["safety_rule_id"] == "effective-config", job


def test_a_job_without_any_document_carries_no_effective_config(gw):
    status, out, _ = gw.submit({"prompt": "hello", "team_id": f"nobody-{gw.unique}"})
    assert status == 200, out
    status, job = gw.call("GET", f"/api/v1/jobs/{out['job_id']}", role="admin")
    assert "effective_config" not in job, job


def test_a_topic_input_schema_refuses_a_submit_with_the_path(gw):
    schema = {"type": "object", "required": ["amount"],
              "properties": {"amount": {"type": "number", "maximum": 100}}}
    status, out = gw.call("POST", "/api/v1/schemas", {"id": "payment", "schema": schema},
                          role="admin")
    assert status == 204, out
    status, out = gw.call("POST", "/api/v1/topics",
                          {"name": "job.remedy.safe", "pool": "default",
                           "input_schema_id": "payment"},
                          role="admin")
    assert status in (200, 201), out

    status, out, _ = gw.submit({"prompt": "pay", "topic": "job.remedy.safe",
                                "context": {"amount": 250}})
    assert (status, out["code"]) == (400, "schema_validation_failed"), out
    assert out["violations"][0]["path"] == "$.context.amount", out
    status, out, _ = gw.submit({"prompt": "pay", "topic": "job.remedy.safe",
                                "context": {}})
    assert status == 400 and "amount" in out["error"], out
    status, out, _ = gw.submit({"prompt": "pay", "topic": "job.remedy.safe",
                                "context": {"amount": 99}})
    assert status == 200, out
    # Another topic of the same tenant is not bound by it.
    status, out, _ = gw.submit({"prompt": "pay", "context": {"amount": 250}})
    assert status == 200, out


def sent_by_submit(gw: RemediationGateway, body: dict) -> list[bytes]:
    SENT.clear()
    status, out, _ = gw.submit(body)
    assert status == 200, out
    return list(SENT)


def test_the_reads_ride_in_the_rate_limiters_round_trip(gw):
    put_team_config(gw, {"region": "eu"})
    runtime._redis = aioredis.Redis.from_url(REDIS_URL, connection_class=CountingConnection)
    try:
        plain = {"prompt": "p", "team_id": f"nobody-{gw.unique}"}
        sent_by_submit(gw, plain)  # warms the script cache
        bare = sent_by_submit(gw, plain)
        documented = sent_by_submit(gw, {"prompt": "p", "team_id": team(gw)})
    finally:
        runtime.run(runtime._redis.aclose())
        runtime._redis = None
    assert len(documented) == len(bare), (bare, documented)
    # The MGET is in the limiter's pipeline, not a request of its own.
    assert not any(sent.startswith(b"*") and b"MGET" in sent[:20] for sent in bare)
