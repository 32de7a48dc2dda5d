"""The local console server (localstack/web_console.py) in front of real aiohttp servers
started here (tests/integration/web_console_harness.py): routing, static files and the
SPA fallback, the security headers, the REST API behind LocalStack's stage prefix, the
live stream as Server-Sent Events and WebSocket, the limits and the upstreams' failures.
No LocalStack; the last test fronts cordum-stream itself, on the real Redis and NATS."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from tests.integration.web_console_harness import (
    INDEX,
    SECRET,
    STAGE,
    assert_security_headers,
    console,
    free_url,
    next_event,
    raw_get,
    run,
    serve,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "localstack"))

from web_console import (  # noqa: E402  (localstack/web_console.py)
    ConsoleSettings,
    build_app,
    route,
    security_headers,
)


@pytest.fixture(autouse=True)
def _own_redis() -> None:
    """These tests use no Redis: the integration suite's Redis database is not claimed."""


# ---------------------------------------------------------------- routing and static files


def test_paths_go_where_cloudfront_sends_them():
    assert route("/api/v1/stream") == "stream"
    assert route("/api/v1/jobs/j-1/stream") == "stream"
    assert route("/api/v1/jobs/j-1") == "api"
    assert route("/api/v1/jobs/j-1/stream/more") == "api"
    assert route("/api/v1/jobs") == "api"
    assert route("/health") == "api"
    assert route("/api") == "static"
    assert route("/jobs/j-1") == "static"
    assert route("/") == "static"


def test_files_the_app_routes_and_their_cache_headers(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            for path in ("/", "/index.html", "/jobs/j-1", "/workflows/runs/r-1/", "/api"):
                async with c.http.get(c.url + path) as r:
                    assert (r.status, await r.text()) == (200, INDEX), path
                    assert r.headers["Cache-Control"] == "no-cache", path
                    assert r.headers["Content-Type"].startswith("text/html"), path
                    assert_security_headers(r.headers)
            async with c.http.get(c.url + "/assets/app-1.js") as r:
                assert (r.status, await r.text()) == (200, "console.log(1)")
                assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
                assert "javascript" in r.headers["Content-Type"]
                assert_security_headers(r.headers)
            async with c.http.get(c.url + "/favicon.svg") as r:
                assert r.status == 200 and r.headers["Cache-Control"] == "no-cache"
            for missing in ("/assets/gone-2.js", "/robots.txt", "/jobs/j-1.json"):
                async with c.http.get(c.url + missing) as r:
                    assert r.status == 404, missing
                    assert_security_headers(r.headers)
            async with c.http.post(c.url + "/jobs", data=b"x") as r:
                assert r.status == 405

    run(scenario())


def test_no_path_reaches_a_file_outside_dist(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            for target in ("/../secret.txt", "/assets/../../secret.txt", "/%2e%2e/secret.txt",
                           "/assets/..%2f..%2fsecret.txt", "/assets/%2e%2e/%2e%2e/secret.txt",
                           "/..%5csecret.txt", "/leak.txt", "//secret.txt",
                           "/" + str(tmp_path / "secret.txt")):
                status, body = await raw_get(c.url, target)
                assert SECRET not in body, target
                assert status in (400, 403, 404), (target, status)

    run(scenario())


def test_without_dist_it_says_to_run_make_dashboard_and_still_proxies(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path, dist=tmp_path / "no-dist") as c:
            async with c.http.get(c.url + "/") as r:
                assert r.status == 503 and "make dashboard" in await r.text()
                assert_security_headers(r.headers)
            async with c.http.get(c.url + "/assets/app-1.js") as r:
                assert r.status == 404
            async with c.http.get(c.url + "/api/v1/jobs") as r:
                assert r.status == 200 and (await r.json())["path"] == STAGE + "/api/v1/jobs"

    run(scenario())


# ---------------------------------------------------------------- the REST API


def test_the_rest_api_gets_the_request_behind_its_stage_prefix(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            headers = {"X-API-Key": "k1", "X-Tenant-ID": "default",
                       "Proxy-Authorization": "Basic eA==", "Content-Type": "application/json"}
            url = URL(c.url + "/api/v1/jobs/a%20b?limit=5&cursor=a%2Fb", encoded=True)
            async with c.http.post(url, headers=headers, data=b'{"topic":"job.echo"}') as r:
                assert r.status == 200
                call = await r.json()
        assert call["method"] == "POST"
        assert call["path"] == STAGE + "/api/v1/jobs/a%20b?limit=5&cursor=a%2Fb"  # as sent
        assert call["query"] == {"limit": "5", "cursor": "a/b"}
        assert call["body"] == '{"topic":"job.echo"}'
        sent = call["headers"]
        assert sent["x-api-key"] == "k1" and sent["x-tenant-id"] == "default"
        assert sent["content-type"] == "application/json"
        assert "proxy-authorization" not in sent  # hop by hop
        rest_host = c.seen.rest_calls[0]["headers"]["host"]
        assert rest_host != c.url.removeprefix("http://")  # the API's own Host
        assert sent["x-forwarded-host"] == c.url.removeprefix("http://")
        assert sent["x-forwarded-for"] == "127.0.0.1"

    run(scenario())


def test_the_answer_comes_back_with_its_status_headers_and_body(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            async with c.http.delete(c.url + "/api/v1/jobs/j-1?status=409") as r:
                assert r.status == 409
                assert (await r.json())["method"] == "DELETE"
                assert r.headers["X-Upstream"] == "rest"
                assert r.headers.getall("Set-Cookie") == ["a=1; Path=/", "b=2; Path=/"]
                assert_security_headers(r.headers)
            async with c.http.get(c.url + "/health") as r:
                assert r.status == 200 and (await r.json())["path"] == STAGE + "/health"

    run(scenario())


def test_a_body_over_6_mib_is_413_and_never_reaches_the_api(tmp_path):
    async def chunks(size: int) -> AsyncIterator[bytes]:  # no Content-Length
        for start in range(0, size, 1 << 20):
            yield b"x" * min(1 << 20, size - start)

    async def scenario() -> None:
        limit = 6 * 1024 * 1024
        async with console(tmp_path) as c:
            async with c.http.post(c.url + "/api/v1/jobs", data=b"x" * limit) as r:
                assert r.status == 200 and len((await r.json())["body"]) == limit
            async with c.http.post(c.url + "/api/v1/jobs", data=b"x" * (limit + 1)) as r:
                assert r.status == 413
                assert (await r.json())["code"] == "payload_too_large"
                assert_security_headers(r.headers)
            async with c.http.post(c.url + "/api/v1/jobs", data=chunks(limit + 10)) as r:
                assert r.status == 413
        assert len(c.seen.rest_calls) == 1

    run(scenario())


def test_upstreams_that_are_down_are_502_and_an_api_too_slow_is_504(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path / "down", api_down=True, stream_down=True) as c:
            for path in ("/api/v1/jobs", "/health", "/api/v1/stream"):
                async with c.http.get(c.url + path) as r:
                    assert r.status == 502, path
                    assert (await r.json())["code"] == "upstream_unavailable"
                    assert_security_headers(r.headers)
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await c.http.ws_connect(c.url + "/api/v1/stream")
            assert refused.value.status == 502
        async with console(tmp_path / "slow") as c:
            async with c.http.get(c.url + "/api/v1/slow") as r:
                assert r.status == 504 and (await r.json())["code"] == "upstream_timeout"

    (tmp_path / "down").mkdir()
    (tmp_path / "slow").mkdir()
    run(scenario())


# ---------------------------------------------------------------- the live stream


def test_sse_events_pass_before_the_stream_ends_and_a_refusal_passes_back(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            for path in ("/api/v1/stream?types=job.result", "/api/v1/jobs/j-1/stream"):
                c.seen.release.clear()
                async with c.http.get(c.url + path, headers={
                        "Accept": "text/event-stream", "X-API-Key": "k1"}) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"] == "text/event-stream"
                    assert_security_headers(r.headers)
                    # The upstream holds its stream open until told: the first event
                    # arrives all the same.
                    first = await next_event(r.content)
                    assert first == {"id": "1", "event": "first", "data": path.split("?")[0]}
                    c.seen.release.set()
                    assert (await next_event(r.content))["event"] == "second"
                    assert await r.content.read() == b""
            async with c.http.get(c.url + "/api/v1/stream",
                                  headers={"Accept": "text/event-stream"}) as r:
                assert r.status == 401 and (await r.json())["code"] == "unauthorized"

    run(scenario())


def test_a_websocket_is_proxied_both_ways_with_its_subprotocol(tmp_path):
    async def scenario() -> None:
        async with console(tmp_path) as c:
            ws = await c.http.ws_connect(c.url + "/api/v1/jobs/j-1/stream?since=0-0",
                                         protocols=("cordum-api-key", "dG9rZW4"))
            assert ws.protocol == "cordum-api-key"
            assert [p.strip() for p in c.seen.offered_protocols[0].split(",")] == [
                "cordum-api-key", "dG9rZW4"]
            assert json.loads((await ws.receive(5)).data) == {"hello": "/api/v1/jobs/j-1/stream"}
            await ws.send_str("ping")
            assert (await ws.receive(5)).data == "echo:ping"
            await ws.send_bytes(b"\x01\x02\x03")
            assert (await ws.receive(5)).data == b"\x03\x02\x01"
            await ws.send_str("close-me")
            closing = await ws.receive(5)
            assert closing.type is aiohttp.WSMsgType.CLOSE
            assert (ws.close_code, closing.extra) == (4001, "bye")
            await ws.close()

    run(scenario())


def test_the_real_stream_through_the_console(tmp_path, own_redis_env, unique):
    """cordum-stream itself (on the real Redis and NATS) behind the console: the key in
    the subprotocol as a browser sends it, the job's frames, its close, a refusal."""
    from tests.integration.test_stream_harness import Tenants, b64url, stream_service, world

    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario() -> None:
        async with stream_service(unique) as svc, world() as w:
            await w.create(job, t.a)
            await w.run(job)
            settings = ConsoleSettings(api_url=free_url(), dist=tmp_path,
                                       stream_url=f"http://127.0.0.1:{svc.port}",
                                       headers=security_headers())
            runner, url = await serve(build_app(settings))
            try:
                async with aiohttp.ClientSession() as http:
                    ws = await http.ws_connect(f"{url}/api/v1/jobs/{job}/stream",
                                               protocols=("cordum-api-key", b64url(t.user_a)))
                    assert ws.protocol == "cordum-api-key"
                    state = json.loads((await ws.receive(5)).data)
                    assert (state["type"], state["id"], state["state"]) == (
                        "job.state", job, "RUNNING")
                    await w.finish(job)
                    await w.result(job)
                    result = json.loads((await ws.receive(5)).data)
                    assert result["jobResult"]["jobId"] == job
                    closed = await ws.receive(5)
                    assert (closed.type, closed.data, closed.extra) == (
                        aiohttp.WSMsgType.CLOSE, 1000, "job finished")

                    async with http.get(f"{url}/api/v1/jobs/{job}/stream", headers={
                            "Accept": "text/event-stream", "X-API-Key": t.user_a}) as r:
                        assert r.status == 200
                        event = await next_event(r.content)
                        assert event["event"] == "job.state"
                        assert json.loads(event["data"])["state"] == "SUCCEEDED"
                    async with http.get(f"{url}/api/v1/stream", headers={
                            "Accept": "text/event-stream", "X-API-Key": "nobody"}) as r:
                        assert r.status == 401
                        assert_security_headers(r.headers)
            finally:
                await runner.cleanup()

    run(scenario())
