"""The echo worker reads the artifact a job's context names: held in Redis (real Redis),
held in S3 (moto), another tenant's (as missing), too large to echo whole (its digest),
and the whole path over NATS with a running worker."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import uuid
from typing import Any

import boto3
import nats
import pytest
import redis.asyncio as aioredis
from moto import mock_aws

from cordum.config import load_settings
from cordum.protocol import (
    SUBJECT_RESULT,
    BusPacket,
    JobRequest,
    JobStatus,
    context_key,
    direct_subject,
    packet,
    pointer,
    result_key,
)
from cordum.store.artifacts import ArtifactStore
from cordum.worker.artifacts import MAX_ECHO_BYTES
from cordum.worker.echo import EchoWorker
from cordum.worker.echo_job import echo
from cordum.worker.settings import EchoWorkerSettings
from tests.conftest import NATS_URL
from tests.helpers import run

TENANT = "worker-art"
BUCKET = "cordum-artifacts-worker-test"


def _job(tenant: str = TENANT) -> JobRequest:
    job_id = f"wa-{uuid.uuid4().hex}"
    return JobRequest(job_id=job_id, topic="job.test.echo", tenant_id=tenant,
                      context_ptr=pointer(context_key(job_id)))


async def _echo_with(redis: aioredis.Redis, req: JobRequest, artifact_ptr: str) -> dict:
    await redis.set(context_key(req.job_id), json.dumps({"artifact_ptr": artifact_ptr}))
    res = await echo(req, redis, "w-1")
    assert res.status == JobStatus.JOB_STATUS_SUCCEEDED, res.error_message
    return json.loads(await redis.get(result_key(req.job_id)))


def test_an_artifact_held_in_redis_is_read_and_echoed() -> None:
    async def scenario() -> None:
        redis = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        try:
            ptr, _ = await ArtifactStore(redis).put(TENANT, b"inline bytes",
                                                    content_type="text/plain",
                                                    retention="short", labels={})
            stored = await _echo_with(redis, _job(), ptr)
            art = stored["artifact"]
            assert art["artifact_ptr"] == ptr and art["content_type"] == "text/plain"
            assert base64.b64decode(art["content_base64"]) == b"inline bytes"
            assert art["sha256"] == hashlib.sha256(b"inline bytes").hexdigest()
            assert stored["echo"] == {"artifact_ptr": ptr}
        finally:
            await redis.aclose()

    run(scenario())


def test_another_tenants_or_a_missing_artifact_fails_as_invalid_input() -> None:
    async def scenario() -> None:
        redis = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        try:
            ptr, _ = await ArtifactStore(redis).put("someone-else", b"theirs",
                                                    content_type="text/plain",
                                                    retention="short", labels={})
            for named in (ptr, "redis://art:nope", "redis://ctx:x"):
                req = _job()
                await redis.set(context_key(req.job_id), json.dumps({"artifact_ptr": named}))
                res = await echo(req, redis, "w-1")
                assert res.status == JobStatus.JOB_STATUS_FAILED, named
                assert res.error_code == "invalid_input"
                assert "theirs" not in res.error_message
        finally:
            await redis.aclose()

    run(scenario())


def test_an_artifact_held_in_s3_is_read_from_its_recorded_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    big = os.urandom(MAX_ECHO_BYTES + 1)

    async def scenario() -> None:
        redis = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        try:
            store = ArtifactStore(redis)
            ptr, meta = await store.reserve(TENANT, len(big), content_type="video/mp4",
                                            retention="standard", labels={}, bucket=BUCKET)
            req = _job()
            await redis.set(context_key(req.job_id), json.dumps({"artifact_ptr": ptr}))
            # Not uploaded yet: a retryable failure.
            res = await echo(req, redis, "w-1")
            assert res.status == JobStatus.JOB_STATUS_FAILED_RETRYABLE
            assert res.error_code == "artifact_unavailable"
            boto3.client("s3", region_name="us-east-1").put_object(
                Bucket=BUCKET, Key=meta.object_key, Body=big)
            stored = await _echo_with(redis, _job(), ptr)
            art = stored["artifact"]
            assert art["size_bytes"] == len(big)
            assert art["sha256"] == hashlib.sha256(big).hexdigest()
            assert "content_base64" not in art
        finally:
            await redis.aclose()

    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        run(scenario())


def test_a_running_worker_answers_a_job_whose_context_names_an_artifact() -> None:
    async def scenario() -> None:
        settings = load_settings(env={"REDIS_URL": os.environ["REDIS_URL"],
                                      "NATS_URL": NATS_URL})
        tag = uuid.uuid4().hex[:8]
        cfg = EchoWorkerSettings(worker_id=f"echo-art-{tag}", pool=f"pool-{tag}",
                                 topics=(f"job.test-{tag}.echo",), max_parallel=1)
        worker = EchoWorker(cfg, settings)
        nc = await nats.connect(NATS_URL)
        redis = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        await worker.start()
        try:
            ptr, _ = await ArtifactStore(redis).put(TENANT, b'{"doc": 1}',
                                                    content_type="application/json",
                                                    retention="short", labels={})
            req = _job()
            await redis.set(context_key(req.job_id), json.dumps({"artifact_ptr": ptr}))
            done = ResultOf(req.job_id)
            sub = await nc.subscribe(SUBJECT_RESULT, cb=done.on)
            await nc.publish(direct_subject(cfg.worker_id), packet(
                trace_id="t", sender_id="s", job_request=req).SerializeToString())
            await nc.flush()
            result = await done.wait()
            await sub.unsubscribe()
            assert result.status == JobStatus.JOB_STATUS_SUCCEEDED, result.error_message
            stored = json.loads(await redis.get(result_key(req.job_id)))
            assert base64.b64decode(stored["artifact"]["content_base64"]) == b'{"doc": 1}'
        finally:
            await worker.stop(timeout_s=1.0)
            await redis.aclose()
            await nc.close()

    run(scenario())


class ResultOf:
    """The first JobResult of one job seen on the result subject."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.found: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def on(self, msg: Any) -> None:
        pkt = BusPacket()
        pkt.ParseFromString(msg.data)
        if (pkt.WhichOneof("payload") == "job_result" and pkt.job_result.job_id == self.job_id
                and not self.found.done()):
            self.found.set_result(pkt.job_result)

    async def wait(self) -> Any:
        return await asyncio.wait_for(self.found, 5.0)
