"""The workflow API's test world: a tenant with keys of each role, the real runner with
its ``announce_start`` recorded instead of queued, and the clean-up of every key a test
made (definitions and indexes carry the tenant, runs are named by uuid).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from cordum import config, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.gateway.core import deps
from cordum.workflow import keys, wiring
from cordum.workflow.model import RunStatus, WorkflowRun, format_time
from cordum.workflow.runner import WorkflowRunner
from cordum.workflow.store import WorkflowStore
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

ADMIN, WRITER, VIEWER, OUTSIDER = "wf-admin", "wf-writer", "wf-viewer", "wf-outsider"


class RecordingRunner(WorkflowRunner):
    """The real runner, except that a start is recorded instead of queued."""

    def __init__(self, store: WorkflowStore, redis: Any, publisher: NatsPublisher) -> None:
        super().__init__(store, redis, publisher, None)
        self.started: list[WorkflowRun] = []
        self.cancelled: list[tuple[str, str]] = []
        self.fail_start = False

    async def announce_start(self, run: WorkflowRun) -> None:
        self.started.append(run)
        if self.fail_start:
            raise RuntimeError("queue unavailable")

    async def cancel(self, tenant: str, run_id: str, *, audit: Any = None) -> bool:
        self.cancelled.append((tenant, run_id))
        return await super().cancel(tenant, run_id, audit=audit)


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unique = unique
        self.tenant = f"wf-{unique}"
        self.other_tenant = f"wf-other-{unique}"
        keys_ = [
            {"key": ADMIN, "tenant": self.tenant, "role": "admin", "principal_id": "ada"},
            {"key": WRITER, "tenant": self.tenant, "role": "jobs.write", "principal_id": "wes"},
            {"key": VIEWER, "tenant": self.tenant, "role": "viewer"},
            {"key": OUTSIDER, "tenant": self.other_tenant, "role": "admin"},
        ]
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys_))
        for var in ("CORDUM_API_KEY", "CORDUM_API_KEYS_PATH", "CORDUM_API_KEYS_SSM_PARAMETER",
                    "CORDUM_API_KEYS_SECRET_ARN", "CORDUM_WORKFLOW_MAX_ACTIVE_RUNS"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()
        self.redis = runtime.redis_client()
        self.store = WorkflowStore(self.redis)
        self.runner = RecordingRunner(self.store, self.redis, NatsPublisher(config.settings()))
        monkeypatch.setattr(wiring, "default_runner", lambda: self.runner)

    def call(self, method: str, path: str, body: Any = None, *, key: str = ADMIN,
             query: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        tenant = self.other_tenant if key == OUTSIDER else self.tenant
        return helpers.call(helpers.event(method, path, body, key=key, tenant=tenant,
                                          query=query, headers=headers))

    def wf_id(self, name: str = "flow") -> str:
        return f"wf-{self.unique}-{name}"

    def definition(self, name: str = "flow", **extra: Any) -> dict[str, Any]:
        return {"id": self.wf_id(name), "name": f"the {name}",
                "steps": {"fetch": {"type": "worker", "topic": "job.default"},
                          "store": {"topic": "job.default", "depends_on": ["fetch"]}},
                **extra}

    def saved(self, name: str = "flow", **extra: Any) -> str:
        status, body, _ = self.call("POST", "/api/v1/workflows", self.definition(name, **extra))
        assert status == 201, body
        return str(body["id"])

    def start(self, workflow_id: str, body: Any = None, **kw: Any) -> str:
        status, answer, _ = self.call("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                      {} if body is None else body, **kw)
        assert status == 200, answer
        return str(answer["run_id"])

    def run(self, run_id: str) -> WorkflowRun:
        found = runtime.run(self.store.get_run(self.tenant, run_id))
        assert found is not None
        return found

    def finish(self, run_id: str, status: RunStatus = RunStatus.SUCCEEDED) -> None:
        run = self.run(run_id)
        run.status = status
        run.completed_at = run.updated_at = format_time(datetime.now(UTC))
        runtime.run(self.store.save(run, timeline=[], outbox=None, timer_at=None))

    def cleanup(self) -> None:
        async def forget() -> None:
            run_ids: set[str] = set()
            for tenant in (self.tenant, self.other_tenant):
                found = await self.redis.zrange(keys.tenant_runs_key(tenant), 0, -1)
                run_ids |= {m.decode() for m in found}
            run_ids |= {r.id for r in self.runner.started}
            doomed = [k for r in run_ids for k in (
                keys.run_key(r), keys.run_definition_key(r), keys.outbox_key(r),
                keys.timeline_key(r), keys.run_lock_key(r))]
            if doomed:
                await self.redis.delete(*doomed)
            if run_ids:
                await self.redis.zrem(keys.OPEN_RUNS_KEY, *run_ids)
            timers = [m for m in await self.redis.zrange(keys.TIMERS_KEY, 0, -1)
                      if self.unique in m.decode()]
            if timers:
                await self.redis.zrem(keys.TIMERS_KEY, *timers)
            await helpers.delete_keys(self.redis, f"*{self.unique}*")

        runtime.run(forget())


def world(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """The body of a test module's ``api`` fixture: the world, then its clean-up."""
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        try:
            yield a
        finally:
            a.cleanup()


def is_rfc3339(value: Any) -> bool:
    return isinstance(value, str) and value.endswith("Z") and \
        datetime.fromisoformat(value).tzinfo is not None
