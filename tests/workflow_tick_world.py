"""Runs of several tenants waiting on timers that are due, on the real Redis, and the
workflow reconciler ticking over them: what the tick's isolation and fairness tests
share.

Each run starts with a one-second delay step. ``make_due`` waits for those delays to be
over, then moves each run's timer and its place among the open runs back to 2001, in
the order the runs were made: a tick meets them before anything else the shared Redis
holds (other tests' runs are scored in the present), in that order.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis

from cordum.bus.publisher import NatsPublisher
from cordum.bus.workflow_events import RunEvent
from cordum.config import load_settings
from cordum.workflow import keys
from cordum.workflow.definition import Workflow, parse_workflow
from cordum.workflow.model import RunStatus, WorkflowRun, format_time
from cordum.workflow.reconciler import ReconcilerPolicy, WorkflowReconciler
from cordum.workflow.runner import WorkflowRunner
from cordum.workflow.store import WorkflowStore
from tests.conftest import NATS_URL, REDIS_URL

DELAY = {"wait": {"type": "delay", "delay_sec": 1}}
"""A run that waits one second on its timer, then succeeds."""
FAR = {"wait": {"type": "delay", "delay_sec": 3600}}
"""A run whose delay is an hour away: a tick of another process on the shared Redis finds
nothing to do on it, however early ``make_due`` scores its timer."""
BAD_SCHEMA = {**DELAY, "bad": {"type": "worker", "topic": "job.default", "depends_on": ["wait"],
                               "input_schema": {"$ref": "#/definitions/missing"}}}
"""A run whose second step's input schema points nowhere: once the delay is over, building
that step's input raised in the validator. Saving such a definition is refused now; a
run of one saved before that (its definition snapshot already stored) is made with
``checked=False``."""
BASE_S = 978_307_200
"""2001-01-01T00:00:00Z: where ``make_due`` puts the timers and open-run scores."""


class TickWorld:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.unique = uuid.uuid4().hex[:10]
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = WorkflowStore(self.redis)
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.runner = WorkflowRunner(self.store, self.redis, NatsPublisher(cfg), None)
        self.made: list[tuple[str, str, str]] = []
        """(tenant, workflow id, run id) of each run made, in order."""
        self._last_start = 0.0

    def tenant(self, name: str) -> str:
        return f"tick-{name}-{self.unique}"

    def do(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    async def run_of(self, tenant: str, steps: dict[str, Any] | None = None, *,
                     checked: bool = True) -> str:
        """A started run of a new definition made of ``steps`` (default: ``DELAY``); with
        ``checked`` False, of one stored without the checks of a save."""
        stamp = format_time(datetime.now(UTC))
        doc = {"id": f"wf-{self.unique}-{len(self.made)}", "name": "tick",
               "steps": steps or DELAY}
        if checked:
            wf = parse_workflow(doc, tenant=tenant, principal="p", now=stamp)
        else:
            wf = Workflow.model_validate({**doc, "org_id": tenant, "created_at": stamp,
                                          "updated_at": stamp})
        run = WorkflowRun(id=str(uuid.uuid4()), workflow_id=wf.id, org_id=tenant,
                          status=RunStatus.PENDING, created_at=stamp, updated_at=stamp)
        await self.store.create_run(run, wf, idempotency_key="", body_hash=run.id,
                                    max_active=0)
        self.made.append((tenant, wf.id, run.id))
        await self.runner.apply(RunEvent("start", run.id, tenant=tenant))
        self._last_start = time.monotonic()
        return run.id

    async def make_due(self) -> None:
        """Once every delay is over: the runs' timers and open-run scores in 2001."""
        await asyncio.sleep(max(0.0, self._last_start + 1.1 - time.monotonic()))
        pipe = self.redis.pipeline(transaction=False)
        for i, (_, workflow_id, run_id) in enumerate(self.made):
            pipe.zadd(keys.TIMERS_KEY, {keys.timer_member(workflow_id, run_id): BASE_S + i},
                      xx=True)
            pipe.zadd(keys.OPEN_RUNS_KEY, {run_id: (BASE_S + i) * 1_000_000}, xx=True)
        await pipe.execute()

    def reconciler(self, **policy: Any) -> WorkflowReconciler:
        return WorkflowReconciler(self.runner, ReconcilerPolicy(**policy))

    async def status(self, run_id: str) -> str:
        tenant = next(t for t, _, r in self.made if r == run_id)
        run = await self.store.get_run(tenant, run_id)
        return run.status if run is not None else ""

    async def get(self, run_id: str) -> WorkflowRun:
        tenant = next(t for t, _, r in self.made if r == run_id)
        run = await self.store.get_run(tenant, run_id)
        assert run is not None
        return run

    async def close(self) -> None:
        for tenant, _, run_id in self.made:
            await self.store.delete_run(tenant, run_id)
            await self.redis.delete(keys.run_errors_key(run_id))
        await self.redis.aclose()


def tick_world() -> Iterator[TickWorld]:
    """A ``TickWorld`` on its own loop, its runs deleted afterwards (for a fixture)."""
    loop = asyncio.new_event_loop()
    w = TickWorld(loop)
    yield w
    loop.run_until_complete(w.close())
    loop.close()
