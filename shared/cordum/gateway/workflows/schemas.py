"""Response and request bodies of the workflow routes, as Cordum's spec and cordum-sdk
0.1.0 have them (the conventions of ``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, PaginatedResponse, optional

# Shapes cordum-sdk 0.1.0 parses: a definition needs ``id``, ``name`` and ``steps``
# (each step its ``id`` and ``type``); a run's ``started_at`` is never null; a
# timeline event's time is read as ``timestamp``.

RunStatus = Literal["pending", "running", "waiting", "succeeded", "failed", "denied",
                    "cancelled", "timed_out"]


class WorkflowStepRetry(Body):
    max_retries: int = optional()
    initial_backoff_sec: float = optional()
    max_backoff_sec: float = optional()
    """0: no cap."""
    multiplier: float = optional()


class WorkflowStep(Body):
    """A step as saved; besides these, every field of Cordum's step (docs/workflows.md)."""

    id: str
    type: str
    """worker (the default), approval, condition, delay, notify, transform, storage,
    switch, parallel, loop, subworkflow."""
    name: str = optional()
    depends_on: list[str] = optional()
    condition: str = optional()
    topic: str = optional()
    input: dict[str, Any] | None = optional()
    timeout_sec: int = optional()
    retry: WorkflowStepRetry = optional()
    on_error: str = optional()


class WorkflowDefinition(Body):
    id: str
    name: str
    steps: dict[str, WorkflowStep]
    """Step id -> step."""
    org_id: str = optional()
    team_id: str = optional()
    description: str = optional()
    version: str = optional()
    timeout_sec: int = optional()
    config: dict[str, Any] = optional()
    input_schema: dict[str, Any] = optional()
    """JSON Schema a run's input must satisfy."""
    created_by: str = optional()
    created_at: AwareDatetime = optional()
    updated_at: AwareDatetime = optional()


class SaveWorkflowRequest(Body):
    """A definition to save (an upsert by ``id``; a new id is made when it is absent).

    Steps come as a map step id -> step (the map key wins over the step's ``id``) or as
    a list of steps with ids; ``retry`` as ``{max_retries, initial_backoff_sec,
    max_backoff_sec, multiplier}`` or cordum-sdk's ``{max_attempts, backoff_sec}``.
    Keys the definition has no field for are refused (400 ``invalid_json``), except a
    step's ``config``, which cordum-sdk sends.
    """

    id: str = optional()
    name: str = optional()
    """At most 256 characters."""
    description: str = optional()
    version: str = optional()
    team_id: str = optional()
    timeout_sec: int = optional()
    """0..604800."""
    steps: dict[str, dict[str, Any]] | list[dict[str, Any]] = optional()
    config: dict[str, Any] | None = optional()
    input_schema: dict[str, Any] | None = optional()


class CreateWorkflowResponse(Body):
    id: str = optional()


class WorkflowRunInput(Body):
    """The run's input itself, no wrapper; checked against the definition's
    ``input_schema``."""


class StartWorkflowRunResponse(Body):
    run_id: str = optional()


class RerunWorkflowRequest(Body):
    """Rerun a run: a new run of the same definition (the one the run ran) and input."""

    from_step: str | None = optional()
    """The step to run from: its transitive dependencies must have succeeded and are
    kept (their step runs and outputs); every other step runs again. Empty or absent:
    the whole workflow runs again."""
    dry_run: bool | None = optional()
    """Walk the new run without publishing jobs (false when absent)."""


class RerunWorkflowResponse(Body):
    run_id: str = optional()
    """The new run."""


class WorkflowDryRunRequest(Body):
    input: dict[str, Any] | None = optional()
    """A run input: what the steps' ``route_labels`` templates are rendered against."""
    environment: str | dict[str, Any] | None = optional()
    """A name (or an object, as JSON), set as ``environment`` in the env of each job
    asked about."""


DryRunDecision = Literal["ALLOW", "DENY", "REQUIRE_APPROVAL", "THROTTLE",
                         "ALLOW_WITH_CONSTRAINTS", "N/A", "ERROR"]


class WorkflowDryRunStep(Body):
    step_id: str = optional()
    step_name: str = optional()
    step_type: str = optional()
    decision: DryRunDecision = optional()
    """The safety kernel's decision about the step's job; N/A for a step that runs no
    job; ERROR when the kernel could not be asked (``reason`` says why)."""
    reason: str = optional()
    rule_id: str = optional()


class WorkflowDryRunResponse(Body):
    workflow_id: str = optional()
    steps: list[WorkflowDryRunStep] = optional()
    """One per step, in the definition's order."""


class RunSummary(Body):
    id: str = optional()
    workflow_id: str = optional()
    status: RunStatus = optional()
    started_at: AwareDatetime = optional()
    completed_at: AwareDatetime | None = optional()
    error: dict[str, Any] | None = optional()
    org_id: str = optional()
    triggered_by: str = optional()
    created_at: AwareDatetime = optional()
    updated_at: AwareDatetime = optional()


class RunStepStatus(Body):
    step_id: str = optional()
    status: str = optional()
    """A run status, or ``skipped``."""
    started_at: AwareDatetime | None = optional()
    completed_at: AwareDatetime | None = optional()
    next_attempt_at: AwareDatetime | None = optional()
    attempts: int = optional()
    job_id: str | None = optional()
    error: dict[str, Any] | None = optional()
    output: Any = optional()


class RunTimer(Body):
    """When the run next wakes up by itself (a delay, a retry backoff, its timeout)."""

    workflow_id: str = optional()
    run_id: str = optional()
    fires_at: AwareDatetime = optional()
    remaining_ms: int = optional()
    """0 once due."""


class RunDetail(RunSummary):
    input: dict[str, Any] = optional()
    output: Any = optional()
    steps: dict[str, RunStepStatus] = optional()
    """Step id -> its run."""
    context: dict[str, Any] = optional()
    created_by: str = optional()
    """Who started it (``triggered_by`` again)."""
    dry_run: bool = optional()
    timers: list[RunTimer] = optional()


class RunList(PaginatedResponse):
    items: list[RunSummary] = optional()


class TimelineEvent(Body):
    timestamp: AwareDatetime = optional()
    time: AwareDatetime = optional()
    """``timestamp`` again, under Cordum's name."""
    type: str = optional()
    run_id: str = optional()
    workflow_id: str = optional()
    step_id: str | None = optional()
    job_id: str = optional()
    status: str = optional()
    result_ptr: str = optional()
    message: str = optional()
    data: dict[str, Any] | None = optional()
