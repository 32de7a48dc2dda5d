"""The live event stream of the local stack (`make up` runs cordum-stream under its
supervisor at CORDUM_STREAM_URL): jobs submitted over the REST API reach cordum-sdk's
``client.stream()``, a raw WebSocket client speaking Cordum's subprotocol, and an SSE
client that reconnects with its last event id; another tenant's key sees none of them;
a quarantined job's result frame carries no pointer."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import pytest

FRAME_TIMEOUT_S = 60.0
"""A job through the local stack takes a second or two; LocalStack's queue polls more."""


@pytest.fixture
def stream(stack) -> str:
    if not stack.stream_url:
        pytest.fail("no CORDUM_STREAM_URL in .cordum/local.env: run `make up` again")
    return stack.stream_url


def submit(stack, topic: str = "job.echo", prompt: str = "stream me") -> str:
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": topic, "prompt": prompt})
    assert status == 200, body
    return str(body["job_id"])


def job_of(frame: dict[str, Any]) -> str:
    for key in ("jobRequest", "jobResult", "jobProgress", "jobCancel"):
        if key in frame:
            return str(frame[key].get("jobId", ""))
    return ""


def b64url(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


async def sse_events(response: aiohttp.ClientResponse):
    """(id, type, data) of each event of an SSE response, as the spec splits them."""
    fields: dict[str, str] = {}
    while True:
        raw = await response.content.readline()
        if not raw:
            return
        line = raw.decode().rstrip("\r\n")
        if not line:
            if "data" in fields:
                yield fields.get("id", ""), fields.get("event", ""), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


async def sse_open(http: aiohttp.ClientSession, base: str, key: str, tenant: str, *,
                   last_id: str = "", query: dict[str, str] | None = None):
    headers = {"Accept": "text/event-stream", "X-API-Key": key, "X-Tenant-ID": tenant}
    if last_id:
        headers["Last-Event-ID"] = last_id
    response = await http.get(f"{base}/api/v1/stream", params=query or {}, headers=headers)
    assert response.status == 200, await response.text()
    return response


def test_the_sdk_and_a_raw_websocket_receive_a_jobs_request_and_result(stack, stream):
    cordum_sdk = pytest.importorskip("cordum_sdk")

    async def scenario() -> tuple[list[Any], list[dict[str, Any]], str]:
        client = cordum_sdk.AsyncCordumClient(stream, auth=stack.key, tenant_id=stack.tenant)
        sdk_seen: list[Any] = []
        ws_seen: list[dict[str, Any]] = []
        job: dict[str, str] = {}
        started = asyncio.Event()

        async def follow_sdk() -> None:
            async for item in client.stream():
                if item.event == "message" and not item.raw_data:
                    continue  # the SDK's reading of a retry line or a ping comment
                if isinstance(item.data, dict) and job and job_of(item.data) == job["id"]:
                    sdk_seen.append(item)
                    if item.event == "job.result":
                        return

        async with aiohttp.ClientSession() as http:
            # A browser's way: the key offered as the second subprotocol beside
            # "cordum-api-key" (Sec-WebSocket-Protocol), the tenant in the query
            ws = await http.ws_connect(
                f"{stream}/api/v1/stream", params={"tenant_id": stack.tenant},
                protocols=("cordum-api-key", b64url(stack.key)))
            # and the server answers the identifier, never the key
            assert ws.protocol == "cordum-api-key"
            reader = asyncio.create_task(follow_sdk())
            await asyncio.sleep(1.0)  # the SDK has no "connected" hook
            started.set()
            job["id"] = submit(stack)
            async with asyncio.timeout(FRAME_TIMEOUT_S):
                async for msg in ws:
                    frame = json.loads(msg.data)
                    if job_of(frame) == job["id"]:
                        ws_seen.append(frame)
                        if "jobResult" in frame:
                            break
                await reader
            await ws.close()
        return sdk_seen, ws_seen, job["id"]

    sdk_seen, ws_seen, job_id = asyncio.run(scenario())
    # Then the SDK read the job's request and its result as named SSE events
    sdk_types = [item.event for item in sdk_seen]
    assert "job.submit" in sdk_types and sdk_types[-1] == "job.result", sdk_types
    # And the WebSocket got the same frames: protojson BusPackets, payload inlined,
    # createdAt as RFC 3339, no credentials
    request = next(f for f in ws_seen if "jobRequest" in f)
    result = ws_seen[-1]
    assert request["jobRequest"]["topic"] == "job.echo"
    assert request["jobRequest"]["tenantId"] == stack.tenant
    assert result["jobResult"]["status"] == "JOB_STATUS_SUCCEEDED"
    assert result["jobResult"]["resultPtr"] == f"redis://res:{job_id}"
    assert result["createdAt"].endswith("Z") and "T" in result["createdAt"]
    assert all("authToken" not in f and "signature" not in f and "payload" not in f
               for f in ws_seen)
    sdk_result = sdk_seen[-1].data
    assert sdk_result["jobResult"] == result["jobResult"]


def test_another_tenants_key_sees_none_of_it(stack, stream):
    if not stack.other_key:
        pytest.fail("no CORDUM_OTHER_TENANT_KEY in .cordum/local.env: run `make up` again")

    async def scenario() -> tuple[list[str], list[str]]:
        async with aiohttp.ClientSession() as http:
            mine = await sse_open(http, stream, stack.key, stack.tenant)
            theirs = await sse_open(http, stream, stack.other_key, stack.other_tenant)
            # A key may not name a tenant not its own
            refused = await http.get(f"{stream}/api/v1/stream", headers={
                "Accept": "text/event-stream", "X-API-Key": stack.other_key,
                "X-Tenant-ID": stack.tenant})
            assert refused.status == 403, await refused.text()
            job_id = submit(stack)
            seen_mine: list[str] = []
            async with asyncio.timeout(FRAME_TIMEOUT_S):
                async for _, kind, data in sse_events(mine):
                    if job_of(data) == job_id:
                        seen_mine.append(kind)
                        if kind == "job.result":
                            break
            seen_theirs: list[str] = []
            try:
                async with asyncio.timeout(3.0):
                    async for _, kind, data in sse_events(theirs):
                        seen_theirs.append(f"{kind} {job_of(data)}")
            except TimeoutError:
                pass
            mine.close()
            theirs.close()
            return seen_mine, seen_theirs

    seen_mine, seen_theirs = asyncio.run(scenario())
    assert "job.submit" in seen_mine and seen_mine[-1] == "job.result"
    # Then tenant B's stream stayed silent while tenant A's job ran
    assert seen_theirs == []


def test_a_quarantined_jobs_result_frame_carries_no_pointer(stack, stream):
    async def scenario() -> tuple[str, dict[str, Any]]:
        async with aiohttp.ClientSession() as http:
            events = await sse_open(http, stream, stack.key, stack.tenant,
                                    query={"types": "job.result"})
            job_id = submit(stack, topic="job.echo.quarantine", prompt="harmless")
            async with asyncio.timeout(FRAME_TIMEOUT_S):
                async for _, _, data in sse_events(events):
                    if job_of(data) == job_id:
                        events.close()
                        return job_id, data
        raise AssertionError("no result frame")

    job_id, frame = asyncio.run(scenario())
    # Then the frame says what the jobs API says: not succeeded, nothing to read
    assert frame["jobResult"]["status"] != "JOB_STATUS_SUCCEEDED", frame
    assert "resultPtr" not in frame["jobResult"] and "artifactPtrs" not in frame["jobResult"]
    job = stack.wait_terminal(job_id, 90)
    assert job["state"] == "OUTPUT_QUARANTINED" and not job.get("result_ptr")


def test_a_client_that_reconnects_with_its_last_id_gets_every_event_once(stack, stream):
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with aiohttp.ClientSession() as http:
            first = await sse_open(http, stream, stack.key, stack.tenant,
                                   query={"types": "job.submit,job.result"})
            jobs = [submit(stack, prompt=f"resume {i}") for i in range(3)]
            ids: list[str] = []
            seen: list[str] = []
            # Read until the first job's result, then drop the connection mid-run
            async with asyncio.timeout(FRAME_TIMEOUT_S):
                async for event_id, kind, data in sse_events(first):
                    if job_of(data) in jobs:
                        ids.append(event_id)
                        seen.append(f"{kind} {job_of(data)}")
                        if kind == "job.result":
                            break
            first.close()
            await asyncio.sleep(2.0)  # the other jobs go on meanwhile
            # When it comes back with the last id it saw
            again = await sse_open(http, stream, stack.key, stack.tenant, last_id=ids[-1],
                                   query={"types": "job.submit,job.result"})
            async with asyncio.timeout(FRAME_TIMEOUT_S):
                async for event_id, kind, data in sse_events(again):
                    if job_of(data) in jobs:
                        ids.append(event_id)
                        seen.append(f"{kind} {job_of(data)}")
                        if sum(s.startswith("job.result") for s in seen) == len(jobs):
                            break
            again.close()
            return seen, [f"{k} {j}" for j in jobs for k in ("job.submit", "job.result")], ids

    seen, expected, ids = asyncio.run(scenario())
    # Then every event of the three jobs arrived, none twice, in the log's order
    assert sorted(seen) == sorted(expected), seen
    assert len(ids) == len(set(ids)) and all(ids)
