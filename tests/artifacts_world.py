"""The gateway on two tenants for the artifact and memory tests: keys of each role, jobs
seeded in any state with a context and a result, and calls as one key or another."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest

from cordum import config, protocol, runtime
from cordum.gateway.core import deps
from cordum.store import artifact_objects
from cordum.store.jobs import JobState, JobStore, NewJob, meta_key
from cordum.store.results import decision_key, redacted_key
from tests import helpers
from tests.conftest import NATS_URL

BUCKET = "cordum-artifacts-test"


class World:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch, *,
                 bucket: str = "") -> None:
        self.tenant = f"art-{unique}"
        self.other_tenant = f"art-other-{unique}"
        self.admin, self.user, self.viewer = (f"{r}-{unique}" for r in ("adm", "usr", "view"))
        self.other = f"other-{unique}"
        self.every = f"every-{unique}"
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
            {"key": self.admin, "tenant": self.tenant, "role": "admin", "principal_id": "ops"},
            {"key": self.user, "tenant": self.tenant, "role": "user", "principal_id": "ann"},
            {"key": self.viewer, "tenant": self.tenant, "role": "viewer", "principal_id": "vi"},
            {"key": self.other, "tenant": self.other_tenant, "role": "admin",
             "principal_id": "eve"},
            {"key": self.every, "tenant": "*", "role": "admin", "principal_id": "root"}]))
        for var in ("CORDUM_API_KEY", "CORDUM_API_KEYS_PATH", "CORDUM_API_KEYS_SSM_PARAMETER",
                    "CORDUM_API_KEYS_SECRET_ARN", "CORDUM_API_KEYS_SECRET_ID",
                    "OUTPUT_POLICY_ENABLED", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(var, raising=False)
        if bucket:
            monkeypatch.setenv("CORDUM_ARTIFACT_BUCKET", bucket)
            for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                monkeypatch.setenv(var, "testing")
            monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            monkeypatch.delenv("AWS_PROFILE", raising=False)
        else:
            monkeypatch.delenv("CORDUM_ARTIFACT_BUCKET", raising=False)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        self.reset()

    @staticmethod
    def reset() -> None:
        config.settings.cache_clear()
        artifact_objects.signing_client.cache_clear()
        deps.reset()
        runtime.reset()

    @property
    def redis(self) -> Any:
        return runtime.redis_client()

    def call(self, method: str, path: str, body: Any = None, *, key: str | None = None,
             tenant: str | None = None, query: dict[str, str] | None = None,
             ) -> tuple[int, Any]:
        status, answer, _ = helpers.call(helpers.event(
            method, path, body, key=key or self.admin, tenant=tenant or self.tenant,
            query=query))
        return status, answer

    def put(self, content: bytes | str, *, key: str | None = None,
            **fields: Any) -> dict[str, Any]:
        data = content.encode() if isinstance(content, str) else content
        status, body = self.call("POST", "/api/v1/artifacts", {
            "content_base64": base64.b64encode(data).decode(), **fields}, key=key)
        assert status == 200, body
        return body

    def memory(self, key: str | None = None, *, as_key: str | None = None,
               tenant: str | None = None, **query: str) -> tuple[int, Any]:
        return self.call("GET", "/api/v1/memory", key=as_key, tenant=tenant,
                         query=query or ({"key": key} if key else None))

    def job(self, state: JobState = JobState.SUCCEEDED, *, tenant: str | None = None,
            context: Any = None, result: Any = None, meta: dict[str, str] | None = None,
            decision: dict[str, Any] | None = None, redacted: Any = None) -> str:
        """A job of ``tenant`` (the caller's by default) in ``state``, its context at
        ctx:<id> and, when given, its result at res:<id> named by its meta."""
        job_id = f"art-job-{uuid.uuid4().hex[:12]}"
        tenant = tenant or self.tenant
        ctx = json.dumps(context if context is not None else {"prompt": "hello"})
        req = protocol.JobRequest(job_id=job_id, topic="job.default", tenant_id=tenant,
                                  context_ptr=protocol.pointer(protocol.context_key(job_id)))

        async def go() -> None:
            await JobStore(self.redis).create(NewJob(
                job_id=job_id, trace_id=job_id, tenant=tenant, topic="job.default",
                context=ctx, request=str(req), meta={}, state=JobState.PENDING))
            fields = {"state": str(state.value), **(meta or {})}
            if result is not None:
                await self.redis.set(protocol.result_key(job_id), json.dumps(result))
                fields.setdefault("result_ptr", protocol.pointer(protocol.result_key(job_id)))
            if redacted is not None:
                await self.redis.set(redacted_key(job_id), json.dumps(redacted))
            await self.redis.hset(meta_key(job_id), mapping=fields)
            if decision is not None:
                await self.redis.set(decision_key(job_id), json.dumps(decision))

        runtime.run(go())
        return job_id


def final(decision: str = "ALLOW", *, quarantined: bool = False) -> str:
    """An ``output_safety`` record of a final output decision."""
    return json.dumps({"phase": "async", "decision": decision, "quarantined": quarantined})
