"""Workflow definitions and runs behind the HTTP API.

Definitions and runs belong to the caller's tenant (its principal's, never a
header's or a body's): another tenant's read the same as ones that do not exist.

Starting a run stores it ``pending`` (``WorkflowStore.create_run``: idempotency
key, the tenant's open-run limit and every index in one script) and then asks
the runner to queue its start. A start that is stored but not queued is not
lost: the workflow reconciler advances every open run, pending ones included,
so the caller still gets its run id. A repeat under the same idempotency key
and body answers the first run and queues nothing.

A rerun (:mod:`cordum.workflow.rerun`) is stored and started the same way, from the
definition snapshot its old run ran; a dry run of a definition
(:mod:`cordum.gateway.workflows.dry_run`) stores nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.workflows import views
from cordum.store.audit_trail import AuditTrail, governance
from cordum.workflow import json_schemas
from cordum.workflow.definition import check_step_count, parse_workflow
from cordum.workflow.errors import InvalidDefinition, InvalidInput, RunNotFound, WorkflowNotFound
from cordum.workflow.input_refs import json_size
from cordum.workflow.limits import RunLimits
from cordum.workflow.model import OPEN_RUN, RunStatus, WorkflowRun, format_time

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.workflows.dry_run import SimulatorFactory
    from cordum.store.audit import AuditEvent
    from cordum.store.jobs import AuditParts
    from cordum.workflow import pinning
    from cordum.workflow.definition import Workflow
    from cordum.workflow.definition_store import DefinitionStore
    from cordum.workflow.store import WorkflowStore

log = logging.getLogger(__name__)


class RunStarter(Protocol):
    """What the service needs of ``cordum.workflow.runner.WorkflowRunner``."""

    async def announce_start(self, run: WorkflowRun) -> None: ...

    async def cancel(self, tenant: str, run_id: str, *,
                     audit: AuditParts | None = None) -> bool: ...


def body_hash(body: Any, *, dry_run: bool = False) -> str:
    """sha256 of the canonical JSON of a start request: what makes a repeat a repeat.
    A dry-run start is another request than a real one with the same body."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if dry_run:
        canonical += "?dry_run"
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_input(schema: Mapping[str, Any] | None, value: Any) -> None:
    """InvalidInput unless ``value`` satisfies ``schema`` (JSON Schema, draft by ``$schema``),
    applied as every schema of a definition is (:mod:`cordum.workflow.json_schemas`):
    references resolve within the schema only, patterns run on RE2, the cost is bounded.
    """
    if not schema:
        return
    refused = json_schemas.check_schema(schema, "input_schema")
    if refused:
        raise InvalidInput(f"the workflow's {refused}")
    problem = json_schemas.problem(value, schema, at="input")
    if problem:
        raise InvalidInput(problem)


class WorkflowService:
    """Definitions CRUD and dry runs; start, rerun, list, read, cancel and delete runs.

    ``max_active_runs`` bounds a tenant's open runs (0: no bound). ``simulator`` opens
    the safety kernel's side-effect-free check for a dry run (None: no kernel, every
    step that dispatches a job is ERROR). ``limits``: timeouts.yaml's ``limits`` (a
    definition's steps, a run's input, the definitions it pins, its document).
    """

    def __init__(self, definitions: DefinitionStore, store: WorkflowStore,
                 runner: RunStarter, *, max_active_runs: int = 0,
                 simulator: SimulatorFactory | None = None,
                 limits: RunLimits | None = None, audit: AuditTrail | None = None) -> None:
        self._definitions = definitions
        self._audit = audit
        self._store = store
        self._runner = runner
        self._max_active = max_active_runs
        self._simulator = simulator
        self._limits = limits or RunLimits()

    # ------------------------------------------------------------------ definitions

    async def list_definitions(self, who: Principal, limit: int) -> list[dict[str, Any]]:
        found = await self._definitions.list_definitions(who.tenant, limit=limit)
        return [views.definition(wf) for wf in found]

    async def save_definition(self, who: Principal, doc: dict[str, Any]) -> str:
        """Create or replace; a replaced definition keeps who made it and when."""
        wf = parse_workflow(doc, tenant=who.tenant, principal=who.principal_id,
                            now=format_time(datetime.now(UTC)))
        check_step_count(wf, self._limits.max_steps_per_definition)
        earlier = await self._definitions.get_definition(who.tenant, wf.id)
        if earlier is not None:
            wf = wf.model_copy(update={"created_at": earlier.created_at,
                                       "created_by": earlier.created_by})
        event = self._event("workflow.update" if earlier is not None else "workflow.create",
                            who, workflow_id=wf.id,
                            extra={"steps": len(wf.steps), "version": wf.version or ""})
        await self._definitions.put_definition(wf, audit=event)
        if self._audit is not None and event is not None:
            await self._audit.drain_quietly(who.tenant)
        return wf.id

    async def get_definition(self, who: Principal, workflow_id: str) -> dict[str, Any]:
        return views.definition(await self._definition(who, workflow_id))

    async def delete_definition(self, who: Principal, workflow_id: str) -> None:
        event = self._event("workflow.delete", who, workflow_id=workflow_id)
        if not await self._definitions.delete_definition(who.tenant, workflow_id,
                                                         audit=self._parts(event)):
            raise WorkflowNotFound("workflow not found")

    def _event(self, type_: str, who: Principal, **fields: Any) -> AuditEvent | None:
        """The event of an act of ``who`` (None when this service records none)."""
        if self._audit is None:
            return None
        return governance(type_, who.tenant, who.principal_id, who.key_id, **fields)

    def _parts(self, event: AuditEvent | None) -> AuditParts | None:
        return None if event is None or self._audit is None else \
            self._audit.script_parts(event)

    async def _definition(self, who: Principal, workflow_id: str) -> Workflow:
        wf = await self._definitions.get_definition(who.tenant, workflow_id)
        if wf is None:
            raise WorkflowNotFound("workflow not found")
        return wf

    # ------------------------------------------------------------------ runs

    async def start_run(self, who: Principal, workflow_id: str, body: dict[str, Any], *,
                        idempotency_key: str = "", dry_run: bool = False) -> str:
        """The run id of a new pending run whose start is queued (or of the run this
        idempotency key started with the same body). A dry run is marked so (``dry_run``,
        label and metadata ``dry_run=true``, as Cordum marks it): the engine walks it
        without publishing jobs."""
        wf = await self._definition(who, workflow_id)
        self._check_input_size(body)
        check_input(wf.input_schema, body)
        now = format_time(datetime.now(UTC))
        run = WorkflowRun(
            id=str(uuid.uuid4()), workflow_id=wf.id, org_id=who.tenant, team_id=wf.team_id,
            input=body, status=RunStatus.PENDING, started_at=now, created_at=now,
            updated_at=now, triggered_by=who.principal_id, idempotency_key=idempotency_key,
            dry_run=dry_run)
        if dry_run:
            run.labels["dry_run"] = run.metadata["dry_run"] = "true"
        event = self._event("run.start", who, run_id=run.id, workflow_id=wf.id,
                            extra={"dry_run": dry_run})
        return await self._open(run, wf, idempotency_key=idempotency_key,
                                body_hash=body_hash(body, dry_run=dry_run),
                                audit=self._parts(event))

    async def rerun(self, who: Principal, run_id: str, *, from_step: str,
                    dry_run: bool) -> str:
        """The id of a new run of ``run_id``'s definition and input, from ``from_step``
        (empty: from scratch), started as any run is: see :mod:`cordum.workflow.rerun`.
        The old run may be open still: only its succeeded steps are taken."""
        from cordum.workflow.rerun import build_rerun

        # The old run with the definition it ran, in one read.
        loaded = await self._store.load(run_id)
        if loaded is not None and loaded[0].org_id == who.tenant:
            old, wf = loaded[0], loaded[1]
        else:
            # Not found, another tenant's (both 404), or stored without its definition.
            old = await self._run(who, run_id)
            wf = await self._definition(who, old.workflow_id)
        run = build_rerun(old, wf, from_step, run_id=str(uuid.uuid4()),
                          triggered_by=who.principal_id,
                          now=format_time(datetime.now(UTC)), dry_run=dry_run)
        # The children the old run pinned: a kept approval never covers a newer child.
        run.child_definitions = old.child_definitions
        event = self._event("run.rerun", who, run_id=run.id, workflow_id=wf.id,
                            extra={"rerun_of": run_id, "from_step": from_step,
                                   "dry_run": dry_run})
        return await self._open(run, wf, idempotency_key="", body_hash=body_hash(run.input),
                                audit=self._parts(event))

    async def _open(self, run: WorkflowRun, wf: Workflow, *, idempotency_key: str,
                    body_hash: str, audit: AuditParts | None = None) -> str:
        """Store a new run (open-run limit, indexes, definition snapshot) and queue its
        start; the earlier run's id when the idempotency key already started one. The
        run pins its children's definitions (unless it has them: a rerun), within the
        run limits (InvalidDefinition, InvalidInput: 400)."""
        from cordum.workflow import pinning

        limits = self._limits
        check_step_count(wf, limits.max_steps_per_definition)
        self._check_input_size(run.input)
        if run.child_definitions is None:
            run.child_definitions = await pinning.pin(wf, self._lookup(run.org_id),
                                                      limits=limits)
        size = json_size(run.to_json())
        if size > limits.max_run_document_bytes:
            raise InvalidDefinition(
                f"the run would start {size} bytes large (its input and the "
                f"{len(run.child_definitions or {})} definitions it pins); a run may be at "
                f"most {limits.max_run_document_bytes} (max_run_document_bytes)")
        run_id, created = await self._store.create_run(
            run, wf, idempotency_key=idempotency_key, body_hash=body_hash,
            max_active=self._max_active, audit=audit)
        if not created:
            return run_id
        try:
            await self._runner.announce_start(run)
        except Exception:
            log.exception("run %s of %s stored but its start not queued; the reconciler "
                          "starts it", run_id, wf.id)
        return run_id

    def _check_input_size(self, value: Any) -> None:
        size, most = json_size(value), self._limits.max_run_input_bytes
        if size > most:
            raise InvalidInput(f"the run's input is {size} bytes; it may be at most {most} "
                               "(max_run_input_bytes)")

    def _lookup(self, tenant: str) -> pinning.Lookup:
        async def lookup(workflow_id: str) -> Workflow | None:
            return await self._definitions.get_definition(tenant, workflow_id)

        return lookup

    async def dry_run(self, who: Principal, workflow_id: str, *,
                      run_input: Mapping[str, Any] | None, environment: str,
                      deadline: float | None = None) -> dict[str, Any]:
        """``{"workflow_id", "steps"}``: each step's policy decision, no job made (see
        :mod:`cordum.gateway.workflows.dry_run`); ``deadline`` on ``time.monotonic()``."""
        from cordum.gateway.workflows import dry_run as preview

        wf = await self._definition(who, workflow_id)
        opened = self._simulator or preview.no_kernel
        async with opened() as simulator:
            steps = await preview.dry_run(
                wf, simulator, tenant=who.tenant, principal=who.principal_id,
                run_input=run_input, environment=environment, deadline=deadline)
        return {"workflow_id": wf.id, "steps": steps}

    async def list_workflow_runs(self, who: Principal, workflow_id: str,
                                 limit: int) -> list[dict[str, Any]]:
        """A definition's newest runs; 404 when neither the definition nor a run is known
        (runs outlive a deleted definition)."""
        runs, _ = await self._store.list_runs(who.tenant, workflow_id=workflow_id, limit=limit)
        if not runs:
            await self._definition(who, workflow_id)
        return [views.run_summary(r) for r in runs]

    async def list_runs(self, who: Principal, *, limit: int, cursor: str = "",
                        workflow_id: str = "", status: str = "",
                        updated_after: int | None = None,
                        updated_before: int | None = None) -> dict[str, Any]:
        """``{"items", "next_cursor"}``, newest first; times are epoch microseconds."""
        runs, next_cursor = await self._store.list_runs(
            who.tenant, workflow_id=workflow_id, status=status, limit=limit, cursor=cursor,
            updated_after=updated_after, updated_before=updated_before)
        return {"items": [views.run_summary(r) for r in runs],
                "next_cursor": next_cursor or None}

    async def get_run(self, who: Principal, run_id: str) -> dict[str, Any]:
        run = await self._run(who, run_id)
        timer_at = self._store.timer_of(run)
        return views.run_detail(run, timer_at, time.time())

    async def timeline(self, who: Principal, run_id: str) -> list[dict[str, Any]]:
        events = await self._store.timeline(who.tenant, run_id)
        if events is None:
            raise RunNotFound("run not found")
        return [views.timeline_event(e) for e in events]

    async def cancel_run(self, who: Principal, workflow_id: str, run_id: str) -> None:
        """Cancel an open run now (RunNotCancellable while it is being advanced); a
        finished run is left as it is."""
        run = await self._run(who, run_id)
        if run.workflow_id != workflow_id:
            raise RunNotFound("run not found")
        event = self._event("run.cancel", who, run_id=run_id, workflow_id=workflow_id,
                            extra={"status_before": str(run.status)})
        await self._runner.cancel(who.tenant, run_id, audit=self._parts(event))

    async def delete_run(self, who: Principal, run_id: str) -> None:
        """Delete a run; an open one is cancelled first, so no job of it runs on unseen."""
        run = await self._run(who, run_id)
        if run.status in OPEN_RUN:
            await self._runner.cancel(who.tenant, run_id)
        if not await self._store.delete_run(who.tenant, run_id):
            raise RunNotFound("run not found")

    async def _run(self, who: Principal, run_id: str) -> WorkflowRun:
        run = await self._store.get_run(who.tenant, run_id)
        if run is None:
            raise RunNotFound("run not found")
        return run
