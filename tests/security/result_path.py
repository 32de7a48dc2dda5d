"""The result path of the security tests: jobs submitted over HTTP, driven through the
real engine (safety kernel process, output policy service, Redis, NATS) on the
gateway's own event loop, and read back over HTTP."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from cordum import protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, settings
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.safety.failmode import FailMode
from cordum.safety.output_client import OutputPolicyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.output_check import OutputChecker
from cordum.scheduler.packets import Outcome
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from tests.helpers import call, event, forget_jobs
from tests.security.conftest import ALICE, meta_of

SAFETY_YAML = r"""
default_decision: allow
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - {id: blocked, decision: quarantine, reason: "blocked topic", match: {topics: [job.blocked]}}
  - {id: leak, decision: quarantine, reason: "private key in output",
     match: {keywords: [BEGIN PRIVATE KEY]}}
"""
TOPICS = ["job.default", "job.blocked"]
PRIVATE_KEY = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


class HeldContentCheck:
    """The output policy client, whose content check first runs ``during()``: what
    anyone sees while the scan is in flight."""

    def __init__(self, inner: OutputPolicyClient, during: Any) -> None:
        self.inner = inner
        self.fail_mode = inner.fail_mode
        self.meta_timeout_s = inner.meta_timeout_s
        self.during = during

    async def check_meta(self, req: Any) -> Any:
        return await self.inner.check_meta(req)

    async def check_content(self, req: Any, content: str, **kwargs: Any) -> Any:
        await self.during(req.job_id)
        return await self.inner.check_content(req, content, **kwargs)

    async def check_result(self, req: Any, content: str, **kwargs: Any) -> Any:
        await self.during(req.job_id)
        return await self.inner.check_result(req, content, **kwargs)


class ResultPath:
    """One worker (``worker``) and the engine, for jobs of ALICE's tenant."""

    def __init__(self, kernel: str, *, output: bool = False,
                 fail_mode: FailMode = FailMode.CLOSED, during: Any = None) -> None:
        self.unique = uuid.uuid4().hex[:12]
        self.worker = f"w-{self.unique}"
        self.snapshot_key = f"test:snapshot:{self.unique}"
        self.redis = runtime.redis_client()
        self.jobs: list[str] = []
        self.client = OutputPolicyClient(kernel, fail_mode=fail_mode) if output else None
        checker = None
        if self.client is not None:
            client: Any = self.client if during is None else HeldContentCheck(self.client,
                                                                              during)
            checker = OutputChecker(client, self.redis)
        self.safety = SafetyClient(kernel, 1.0)
        self.engine = Engine(
            store=JobStore(self.redis),
            registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(topics={t: ["default"] for t in TOPICS},
                                                     pools={})),
            safety=self.safety,
            publisher=NatsPublisher(settings()),
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
            output=checker,
        )

    def submit(self, prompt: str, topic: str = "job.default", key: str = ALICE) -> str:
        status, body, _ = call(event("POST", "/api/v1/jobs", {"topic": topic, "prompt": prompt},
                                     key=key))
        assert status == 200, body
        self.jobs.append(body["job_id"])
        return str(body["job_id"])

    def dispatch(self, job_id: str) -> None:
        """The submit path: the stored request goes to ``worker``, the job is RUNNING."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
               "workers": [{"worker_id": self.worker, "pool": "default", "active_jobs": 0,
                            "max_parallel_jobs": 4}]}
        runtime.run(self.redis.set(self.snapshot_key, json.dumps(doc), ex=60))
        stored = runtime.run(self.redis.get(f"job:req:{job_id}"))
        req = json_format.Parse(stored, protocol.JobRequest(), ignore_unknown_fields=True)
        packet = protocol.packet(trace_id=f"tr-{job_id}", sender_id="test", job_request=req)
        outcome = runtime.run(self.engine.handle_request(packet.SerializeToString()))
        assert outcome.action == "dispatched", outcome
        assert meta_of(job_id)["worker_id"] == self.worker

    def write_result(self, job_id: str, content: str | bytes) -> str:
        """What a worker does before it reports: its output at ``res:<job id>``."""
        key = protocol.result_key(job_id)
        runtime.run(self.redis.set(key, content, ex=120))
        return protocol.pointer(key)

    def report(self, job_id: str, result_ptr: str = "", *,
               status: int = protocol.JobStatus.JOB_STATUS_SUCCEEDED,
               worker: str | None = None) -> Outcome:
        """A JobResult on the result path, as any bus client can publish one."""
        worker = worker or self.worker
        res = protocol.JobResult(job_id=job_id, status=status, worker_id=worker,  # type: ignore[arg-type]
                                 result_ptr=result_ptr, error_message="done")
        packet = protocol.packet(trace_id=f"tr-{job_id}", sender_id=worker, job_result=res)
        return runtime.run(self.engine.handle_result(packet.SerializeToString()))

    def detail(self, job_id: str, key: str = ALICE) -> tuple[dict[str, Any], str]:
        """GET /api/v1/jobs/{id}: the body and its raw JSON text."""
        status, body, _ = call(event("GET", f"/api/v1/jobs/{job_id}", key=key))
        assert status == 200, body
        return body, json.dumps(body)

    def close(self) -> None:
        runtime.run(self.redis.delete(self.snapshot_key))
        runtime.run(forget_jobs(self.redis, self.jobs))
        if self.client is not None:
            runtime.run(self.client.aclose())
        runtime.run(self.safety.aclose())
