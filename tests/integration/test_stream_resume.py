"""Nothing missed on reconnect: a client that comes back with its last event id gets
every event it missed, once, in order, whatever was published while it reconnected;
and is told when the log cannot give it everything."""

from __future__ import annotations

import asyncio

import aiohttp

from cordum.stream.eventlog import log_key
from tests.helpers import run
from tests.integration.test_stream_harness import (
    Sse,
    Tenants,
    stream_service,
    world,
    ws_next,
    ws_open,
)

TEST_TIMEOUT_S = 40.0


def percent(event: dict) -> int:
    return int(event["data"]["jobProgress"].get("percent", 0))


def test_an_sse_client_that_reconnects_with_its_last_id_gets_every_event_once(unique):
    t = Tenants(unique)
    job = f"job-{unique}"
    total = 60

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            sse = await Sse.open(http, svc, t.user_a)
            received: list[int] = []
            ids: list[str] = []

            async def publish():
                for n in range(1, total + 1):
                    await w.progress(job, n)
                    await asyncio.sleep(0.01)

            publisher = asyncio.create_task(publish())
            while len(received) < 10:
                event = await sse.next()
                received.append(percent(event))
                ids.append(event["id"])
            sse.close()  # gone mid-run, while events keep coming
            await asyncio.sleep(0.1)
            again = await Sse.open(http, svc, t.user_a,
                                   headers={"Last-Event-ID": ids[-1]})
            while len(received) < total:
                event = await again.next()
                received.append(percent(event))
                ids.append(event["id"])
            await publisher
            assert received == list(range(1, total + 1))
            assert len(set(ids)) == total
            await asyncio.sleep(0.3)
            assert not await again.ended(0.3)  # and nothing more (no duplicate) comes
            again.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_websocket_learns_ids_from_the_envelope_and_resumes_with_since(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"envelope": "1"})
            await w.progress(job, 1)
            first = await ws_next(ws)
            assert first["type"] == "job.progress" and first["id"]
            assert first["data"]["jobProgress"]["percent"] == 1
            await ws.close()
            for n in (2, 3):
                await w.progress(job, n)
            await asyncio.sleep(0.3)
            again = await ws_open(http, svc, t.user_a,
                                  query={"envelope": "1", "since": first["id"]})
            assert [(await ws_next(again))["data"]["jobProgress"]["percent"]
                    for _ in range(2)] == [2, 3]
            await w.progress(job, 4)
            assert (await ws_next(again))["data"]["jobProgress"]["percent"] == 4
            await again.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_resume_past_the_replay_limit_is_told_what_it_missed(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, replay_max=3) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            sse = await Sse.open(http, svc, t.user_a)
            await w.progress(job, 0)
            since = (await sse.next())["id"]
            sse.close()
            for n in range(1, 7):
                await w.progress(job, n)
            await asyncio.sleep(0.4)
            again = await Sse.open(http, svc, t.user_a, query={"since": since})
            notice = await again.next()
            assert notice["event"] == "stream.truncated" and notice["id"] is None
            assert notice["data"]["reason"] == "replay_limit"
            assert notice["data"]["since"] == since and notice["data"]["limit"] == 3
            replayed = [await again.next() for _ in range(3)]
            assert [percent(e) for e in replayed] == [4, 5, 6]
            # Skipped: the events after `since` up to the one before the first replayed.
            entries = await w.redis.xrange(log_key(t.a), f"({since}", f"({replayed[0]['id']}")
            assert notice["data"]["skipped_to"] == entries[-1][0].decode()
            assert len(entries) == 3
            await w.progress(job, 7)
            assert percent(await again.next()) == 7
            again.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_resume_from_a_trimmed_part_of_the_log_is_told_so(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            sse = await Sse.open(http, svc, t.user_a)
            for n in range(1, 4):
                await w.progress(job, n)
            since = (await sse.next())["id"]
            await sse.next()
            await sse.next()
            sse.close()
            await w.redis.xtrim(log_key(t.a), maxlen=1, approximate=False)
            again = await Sse.open(http, svc, t.user_a, query={"since": since})
            notice = await again.next()
            assert notice["event"] == "stream.truncated"
            assert notice["data"]["reason"] == "log_trimmed"
            assert percent(await again.next()) == 3
            again.close()

    run(scenario(), TEST_TIMEOUT_S)
