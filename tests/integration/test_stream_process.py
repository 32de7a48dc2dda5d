"""``python -m cordum.stream`` as the supervisor runs it: settings from the environment,
health over HTTP, streams, a clean exit on SIGTERM (open streams told 1001), exit 2 on a
bad setting."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.conftest import NATS_URL
from tests.helpers import free_port, run
from tests.integration.test_stream_harness import Tenants, stream_service, ws_open

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


def environment(tenants: Tenants, port: int, **extra: str) -> dict[str, str]:
    keys = [{"key": k.key, "tenant": k.tenant, "role": k.role} for k in tenants.keys()]
    return {**os.environ, "PYTHONPATH": f"{REPO / 'shared'}", "NATS_URL": NATS_URL,
            "STREAM_PORT": str(port), "STREAM_HOST": "127.0.0.1",
            "STREAM_QUEUE_GROUP": f"cordum-stream-test-{tenants.tag}",
            "STREAM_SUBJECT_PREFIX": f"cordum.stream.test{tenants.tag}",
            "CORDUM_API_KEYS": json.dumps(keys), **extra}


def test_the_process_serves_and_stops_on_sigterm(unique):
    t = Tenants(unique)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cordum.stream"],
                            env=environment(t, port), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
            while True:
                try:
                    async with http.get(f"{base}/health") as r:
                        if r.status == 200 and await r.json() == {"status": "ok"}:
                            break
                except aiohttp.ClientError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "never healthy"
                await asyncio.sleep(0.2)
            ws = await http.ws_connect(f"{base}/api/v1/stream",
                                       headers={"X-API-Key": t.user_a})
            proc.send_signal(signal.SIGTERM)
            msg = await ws.receive(timeout=STOP_TIMEOUT_S)
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1001)

    try:
        run(scenario(), START_TIMEOUT_S + STOP_TIMEOUT_S)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output = proc.stdout.read().decode() if proc.stdout else ""
    assert t.user_a not in output  # keys are never logged


def test_a_bad_setting_exits_2_naming_it(unique):
    t = Tenants(unique)
    done = subprocess.run([sys.executable, "-m", "cordum.stream"], cwd=REPO,
                          env=environment(t, free_port(), STREAM_CLIENT_BUFFER="0"),
                          capture_output=True, text=True, timeout=STOP_TIMEOUT_S)
    assert done.returncode == 2
    assert "STREAM_CLIENT_BUFFER" in done.stderr


def test_stopping_a_replica_tells_its_streams_1001(unique):
    t = Tenants(unique)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            async with stream_service(unique) as svc:
                ws = await ws_open(http, svc, t.user_a)
                stopping = asyncio.create_task(svc.stop())
                msg = await ws.receive(timeout=5)
                assert (msg.type, msg.data, msg.extra) == (
                    aiohttp.WSMsgType.CLOSE, 1001, "server shutting down")
                await stopping

    run(scenario(), 30)
