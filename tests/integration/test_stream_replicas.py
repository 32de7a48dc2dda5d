"""Several replicas on one NATS: each event is written to the log once (the taps' queue
group), and the clients of every replica receive it, in the log's order, once."""

from __future__ import annotations

import asyncio

import aiohttp

from cordum.stream.eventlog import log_key
from tests.helpers import eventually, run
from tests.integration.test_stream_harness import (
    Sse,
    Tenants,
    stream_service,
    world,
    ws_open,
    ws_until,
)

TEST_TIMEOUT_S = 40.0


def test_two_replicas_log_each_event_once_and_both_serve_it(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as one, stream_service(unique) as two, \
                world() as w, aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            on_one = await ws_open(http, one, t.user_a)
            on_two = await ws_open(http, two, t.user_a)
            await w.submit(job, t.a)
            await w.run(job)
            await w.finish(job)
            await w.result(job)
            for ws in (on_one, on_two):
                # Frames of no tenant (a worker's heartbeat on the shared bus) may come
                # between: the job's two events, in order, are what each replica serves.
                first = await ws_until(ws, lambda f: "jobRequest" in f or "jobResult" in f)
                assert first["jobRequest"]["jobId"] == job
                second = await ws_until(ws, lambda f: "jobRequest" in f or "jobResult" in f)
                assert second["jobResult"]["jobId"] == job
            assert await w.redis.xlen(log_key(t.a)) == 2
            for ws in (on_one, on_two):
                await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_events_written_by_both_replicas_reach_each_client_in_log_order(unique):
    t = Tenants(unique)
    jobs = [f"job-{unique}-{n}" for n in range(40)]

    async def scenario():
        async with stream_service(unique) as one, stream_service(unique) as two, \
                world() as w, aiohttp.ClientSession() as http:
            for job in jobs:
                await w.create(job, t.a)
            clients = [await Sse.open(http, svc, t.user_a) for svc in (one, two)]
            await asyncio.gather(*(w.submit(job, t.a) for job in jobs))

            async def all_logged() -> bool:
                return await w.redis.xlen(log_key(t.a)) == len(jobs)

            await eventually(all_logged, timeout=5)
            for sse in clients:
                ids = [(await sse.next())["id"] for _ in jobs]
                assert ids == [entry[0].decode() for entry in
                               await w.redis.xrange(log_key(t.a))]
                sse.close()
            assert await w.redis.xlen(log_key(t.a)) == len(jobs)
            # Both replicas wrote some (NATS spreads a queue group's messages), once each.
            assert one.counters.events_written and two.counters.events_written
            assert one.counters.events_written + two.counters.events_written == len(jobs)

    run(scenario(), TEST_TIMEOUT_S)


class Recorder:
    """A client of the hub that keeps what it is given."""

    def __init__(self, caller, filters) -> None:
        self.caller = caller
        self.filters = filters
        self.got: list = []

    def offer(self, event) -> None:
        self.got.append(event)


def test_the_hub_delivers_a_tenants_events_in_log_order_whatever_order_they_come(unique):
    """What a replica does when another's publish overtakes: the events before the one
    that arrived are read from the log and delivered first, and none twice."""
    from cordum.stream import events as ev
    from cordum.stream.eventlog import EventLog
    from cordum.stream.events import Event, Filters
    from cordum.stream.hub import Hub
    from cordum.stream.keys import StreamAuth
    from tests.integration.test_stream_harness import redis_url

    t = Tenants(unique)

    async def scenario():
        import redis.asyncio as aioredis

        redis = aioredis.from_url(redis_url())
        log = EventLog(redis, max_events=100, max_age_s=60)
        hub = Hub(None, log, subject_prefix="unused")
        caller = await StreamAuth.fixed(t.keys()).authenticate({"X-API-Key": t.user_a}, {})
        client = Recorder(caller, Filters())
        await hub.register(client)
        written = [await log.append(Event(ev.JOB_PROGRESS, {"n": n}, t.a, job_id="j"),
                                    f"seen-{unique}-{n}") for n in range(4)]
        for event in (written[2], written[0], written[3], written[1], written[2]):
            await hub.dispatch(event)
        assert [e.data["n"] for e in client.got] == [0, 1, 2, 3]
        hub.unregister(client)
        await redis.aclose()

    run(scenario(), TEST_TIMEOUT_S)
