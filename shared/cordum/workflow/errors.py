"""What the workflow engine refuses, by kind.

Each kind names the HTTP status and the error code the API answers it with, so the
gateway maps them in one place and a test reads the same status a client would.
``retryable`` says whether sending the same request again later may pass.
"""

from __future__ import annotations

from typing import ClassVar


class WorkflowError(Exception):
    """A workflow request that cannot be carried out."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "workflow_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidDefinition(WorkflowError):
    """A workflow definition that does not parse or breaks a rule (ids, graph, limits)."""

    status = 400
    code = "invalid_json"


class InvalidInput(WorkflowError):
    """A run's input that its workflow's ``input_schema`` refuses."""

    status = 400
    code = "invalid_input"


class WorkflowNotFound(WorkflowError):
    """No such definition for this tenant (another tenant's reads the same)."""

    status = 404
    code = "not_found"


class RunNotFound(WorkflowError):
    """No such run for this tenant (another tenant's reads the same)."""

    status = 404
    code = "not_found"


class IdempotencyConflict(WorkflowError):
    """The idempotency key already started a run with another body."""

    status = 409
    code = "RUN_IDEMPOTENCY_CONFLICT"

    def __init__(self, message: str, run_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id


class RunNotRunnable(WorkflowError):
    """The tenant has as many open runs as it may; one must end before another starts."""

    status = 429
    code = "RUN_NOT_RUNNABLE"
    retryable = True


class RunLimitExceeded(WorkflowError):
    """As many runs as ``limits.max_runs_per_root`` allows were made under one root run;
    none more is (its subworkflow step fails ``run_limit_exceeded``)."""

    status = 429
    code = "run_limit_exceeded"


class RunNotCancellable(WorkflowError):
    """The run is being advanced right now (its lock is held); cancel again shortly."""

    status = 409
    code = "RUN_NOT_CANCELLABLE"
    retryable = True


class RerunStepUnknown(WorkflowError):
    """``from_step`` names no step of the run's definition."""

    status = 400
    code = "invalid_request"


class RerunNotRunnable(WorkflowError):
    """A step the rerun would keep did not succeed in the old run."""

    status = 400
    code = "RUN_NOT_RUNNABLE"
