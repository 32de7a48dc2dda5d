"""A subworkflow step's child run, made within the run limits (the runner's spawn).

The child is made from the definition its parent pinned when it was created
(:mod:`cordum.workflow.pinning`; a parent stored before runs pinned definitions reads
the tenant's current one) and pins the part below it. It is stored under the tenant's
open-run limit and counted against its root run's ``max_runs_per_root``. A child that
a limit refuses, or whose input is over ``max_run_input_bytes``, is stored ``failed``
and marked refused instead (in no index, counted nowhere): the parent hears of its end
as of any child's, and its step fails with the refusal's code.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.workflow import pinning, subworkflow
from cordum.workflow.errors import RunLimitExceeded, RunNotRunnable
from cordum.workflow.input_refs import json_size
from cordum.workflow.model import RunStatus, WorkflowRun, format_time

if TYPE_CHECKING:
    from cordum.workflow.definition import Workflow
    from cordum.workflow.definition_store import DefinitionStore
    from cordum.workflow.limits import RunLimits
    from cordum.workflow.store import WorkflowStore


class ChildRuns:
    """Makes child runs; ``max_active_runs`` is the tenant's open-run limit (0: none),
    as the API applies it to a start."""

    def __init__(self, store: WorkflowStore, definitions: DefinitionStore, *,
                 max_active_runs: int, limits: RunLimits) -> None:
        self._store = store
        self._definitions = definitions
        self._max_active = max_active_runs
        self._limits = limits

    async def make(self, parent: WorkflowRun, spec: dict[str, Any],
                   ) -> tuple[WorkflowRun | None, bool]:
        """(the child run, True when this call stored it). None when its definition is
        missing; a refused child comes back terminal. The child's id is the same for
        the same step attempt: a repeated call finds what the first one stored."""
        wf = await self._definition(parent, str(spec["workflow_id"]))
        if wf is None:
            return None, False
        pins = parent.child_definitions
        lookup = (pinning.pinned_lookup(pins) if pins is not None
                  else self._live(parent.org_id))
        stamp = format_time(datetime.now(UTC))
        metadata = dict(spec.get("metadata") or {})
        child = WorkflowRun(
            id=str(spec["run_id"]), workflow_id=wf.id, org_id=parent.org_id,
            team_id=parent.team_id, input=spec.get("input"), status=RunStatus.PENDING,
            started_at=stamp, created_at=stamp, updated_at=stamp,
            triggered_by=parent.triggered_by, metadata=metadata,
            dry_run=bool(spec.get("dry_run")),
            labels={"parent_run_id": parent.id, **({"dry_run": "true"}
                                                   if spec.get("dry_run") else {})},
            child_definitions=await pinning.pin(wf, lookup))
        size, most = json_size(child.input), self._limits.max_run_input_bytes
        if size > most:
            return await self._refused(child, subworkflow.INPUT_TOO_LARGE,
                                       f"the child run's input is {size} bytes; a run's "
                                       f"input may be at most {most} (max_run_input_bytes)")
        try:
            _, created = await self._store.create_run(
                child, wf, idempotency_key=f"subworkflow:{child.id}", body_hash=child.id,
                max_active=self._max_active,
                root_run_id=str(metadata.get(subworkflow.ROOT_RUN) or parent.id),
                max_root_runs=self._limits.max_runs_per_root)
        except RunNotRunnable as exc:
            return await self._refused(child, subworkflow.TENANT_RUN_LIMIT,
                                       f"child run not started: the {exc.message}")
        except RunLimitExceeded as exc:
            return await self._refused(child, subworkflow.RUN_LIMIT_EXCEEDED,
                                       f"child run not started: {exc.message}")
        return child, created

    async def _definition(self, parent: WorkflowRun, workflow_id: str) -> Workflow | None:
        if parent.child_definitions is not None:
            return pinning.pinned_definition(parent.child_definitions, workflow_id)
        # A parent stored before runs pinned their children: the definition as it is now.
        return await self._definitions.get_definition(parent.org_id, workflow_id)

    def _live(self, tenant: str) -> pinning.Lookup:
        async def lookup(workflow_id: str) -> Workflow | None:
            return await self._definitions.get_definition(tenant, workflow_id)

        return lookup

    async def _refused(self, child: WorkflowRun, code: str, message: str,
                       ) -> tuple[WorkflowRun | None, bool]:
        child.status = RunStatus.FAILED
        child.completed_at = child.updated_at
        child.error = {"code": code, "message": message}
        child.metadata[subworkflow.REFUSED] = "true"
        child.child_definitions = None
        if not await self._store.put_refused_run(child):
            # A run of that id is stored (an earlier call made it): that one stands.
            return await self._store.get_run(child.org_id, child.id), False
        return child, True
