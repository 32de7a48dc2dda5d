"""Workflow definitions (validated on save) and runs (the engine's state, stored as JSON).

A definition is a pydantic model: it is what clients send, so it is checked once,
when it is saved, with Cordum's rules (reference §1). Unknown keys are refused as
Cordum refuses them, except the few that cordum-sdk 0.1.0 sends on its own (a
step's ``config``; ``retry`` as ``{max_attempts, backoff_sec}``), which are
accepted. A run is plain dataclasses: the engine mutates it in place and the store
writes it whole, so it stays cheap to copy and free of validation on every step.

Times in run, step and timeline JSON are RFC 3339 UTC strings ending in ``Z``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cordum.workflow.errors import InvalidDefinition

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_ID = 64
MAX_NAME = 256
MAX_TIMEOUT_S = 604800
"""A workflow's or step's ``timeout_sec`` is at most 7 days."""
POLICY_GATES = frozenset({"", "allow", "deny", "require_approval"})
SDK_STEP_KEYS = frozenset({"config"})
"""Keys cordum-sdk 0.1.0's WorkflowStep sends that Cordum's step has no field for."""


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"


TERMINAL_RUN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.DENIED,
                          RunStatus.CANCELLED, RunStatus.TIMED_OUT})
OPEN_RUN = frozenset(s for s in RunStatus if s not in TERMINAL_RUN)


def format_time(instant: datetime) -> str:
    """``2026-11-26T08:00:00.123456Z``; a naive ``instant`` is taken as UTC."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (``Z`` or an offset); naive is UTC. ValueError when it is none."""
    instant = datetime.fromisoformat(text.strip())
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


# --------------------------------------------------------------------------- definitions


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetryPolicy(_Strict):
    """How a failed step is tried again. Zero backoff and multiplier read as the defaults,
    as in Cordum, whose definitions spell out zero values."""

    max_retries: int = Field(default=0, ge=0)
    """Tries after the first; cordum-sdk's ``max_attempts`` counts the first too."""
    initial_backoff_sec: float = Field(default=1, ge=0)
    """Wait before the first retry (cordum-sdk: ``backoff_sec``)."""
    max_backoff_sec: float = Field(default=0, ge=0)
    """Cap of the wait; 0 = no cap."""
    multiplier: float = Field(default=2, ge=0)
    """Growth of the wait per retry."""

    @model_validator(mode="before")
    @classmethod
    def _sdk_spelling(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not {"max_attempts", "backoff_sec"} & data.keys():
            return data
        data = dict(data)
        attempts = data.pop("max_attempts", None)
        backoff = data.pop("backoff_sec", None)
        if attempts is not None and "max_retries" not in data:
            if isinstance(attempts, bool) or not isinstance(attempts, int):
                raise ValueError("max_attempts must be an integer")
            data["max_retries"] = max(attempts - 1, 0)
        if backoff is not None and "initial_backoff_sec" not in data:
            data["initial_backoff_sec"] = backoff
        return data

    @model_validator(mode="after")
    def _zero_is_default(self) -> RetryPolicy:
        if self.initial_backoff_sec == 0:
            self.initial_backoff_sec = 1
        if self.multiplier == 0:
            self.multiplier = 2
        return self


class StepMeta(_Strict):
    """Carried onto the step's job (actor, pack, capability, risk, labels)."""

    actor_id: str = ""
    actor_type: str = ""
    idempotency_key: str = ""
    pack_id: str = ""
    capability: str = ""
    risk_tags: list[str] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)


class Compensation(_Strict):
    """The job that undoes a succeeded step when its run fails fatally."""

    topic: str = Field(min_length=1)
    input: dict[str, Any] | None = None


class Step(_Strict):
    id: str = ""
    name: str = Field(default="", max_length=MAX_NAME)
    type: str = "worker"
    worker_id: str = ""
    topic: str = ""
    depends_on: list[str] = Field(default_factory=list)
    condition: str = ""
    for_each: str = ""
    max_parallel: int = Field(default=0, ge=0)
    input: dict[str, Any] | None = None
    input_schema: dict[str, Any] | None = None
    input_schema_id: str = ""
    output_path: str = ""
    result_data_path: str = ""
    output_schema: dict[str, Any] | None = None
    output_schema_id: str = ""
    meta: StepMeta | None = None
    on_error: str = ""
    retry: RetryPolicy | None = None
    timeout_sec: int = Field(default=0, ge=0, le=MAX_TIMEOUT_S)
    delay_sec: int = Field(default=0, ge=0)
    delay_until: str = ""
    route_labels: dict[str, str] = Field(default_factory=dict)
    policy_gate: str = ""
    compensation: Compensation | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_sdk_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and SDK_STEP_KEYS & data.keys():
            data = {k: v for k, v in data.items() if k not in SDK_STEP_KEYS}
        return data

    @model_validator(mode="after")
    def _check(self) -> Step:
        if not self.type:
            self.type = "worker"
        if self.policy_gate not in POLICY_GATES:
            raise ValueError("policy_gate must be allow, deny or require_approval")
        if self.delay_until and "${" not in self.delay_until:
            try:
                parse_time(self.delay_until)
            except ValueError:
                raise ValueError("delay_until must be an RFC 3339 time") from None
        return self


class Workflow(_Strict):
    id: str = ""
    org_id: str = ""
    team_id: str = ""
    name: str = Field(default="", max_length=MAX_NAME)
    description: str = ""
    version: str = ""
    timeout_sec: int = Field(default=0, ge=0, le=MAX_TIMEOUT_S)
    steps: dict[str, Step] = Field(default_factory=dict)
    config: dict[str, Any] | None = None
    input_schema: dict[str, Any] | None = None
    parameters: list[Any] | dict[str, Any] | None = None
    policy_override: dict[str, Any] | None = None
    created_by: str = ""
    created_at: str = ""
    updated_at: str = ""

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("version"), int | float) and not isinstance(data["version"], bool):
            data["version"] = str(data["version"])
        steps = data.get("steps")
        if isinstance(steps, list):
            data["steps"] = _steps_from_list(steps)
        elif isinstance(steps, dict):
            # The map key names the step, whatever the step says its id is.
            data["steps"] = {k: ({**s, "id": k} if isinstance(s, dict) else s)
                             for k, s in steps.items()}
        return data

    @model_validator(mode="after")
    def _check(self) -> Workflow:
        if self.id:
            check_id("workflow id", self.id)
        for step_id in self.steps:
            check_id("step id", step_id)
        check_graph(self.steps)
        return self

    def to_json(self) -> dict[str, Any]:
        """The definition as stored and answered. Unset (None) fields are left out:
        cordum-sdk 0.1.0 fails on ``"retry": null`` or ``"config": null``."""
        return self.model_dump(mode="json", exclude_none=True)


def _steps_from_list(steps: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, step in enumerate(steps):
        step_id = step.get("id") if isinstance(step, dict) else None
        if not isinstance(step_id, str) or not step_id:
            raise InvalidDefinition(f"steps[{i}]: a step in a list needs an id")
        if step_id in out:
            raise InvalidDefinition(f"steps[{i}]: duplicate step id {step_id!r}")
        out[step_id] = step
    return out


def check_id(what: str, value: str) -> None:
    if len(value) > MAX_ID or not ID_PATTERN.match(value):
        raise InvalidDefinition(
            f"{what} {value[:80]!r} must match {ID_PATTERN.pattern} and be at most "
            f"{MAX_ID} characters")


def check_graph(steps: dict[str, Step]) -> None:
    """Every ``depends_on`` and ``on_error`` target is a step; neither the dependencies
    nor an ``on_error`` chain loop back."""
    for step_id, step in steps.items():
        for dep in step.depends_on:
            if dep not in steps:
                raise InvalidDefinition(f"step {step_id}: depends_on {dep!r} is not a step")
        if step.on_error and step.on_error not in steps:
            raise InvalidDefinition(f"step {step_id}: on_error {step.on_error!r} is not a step")
        if step.on_error == step_id:
            raise InvalidDefinition(f"step {step_id}: on_error names the step itself")
    _check_acyclic(steps)
    for step_id in steps:
        seen = {step_id}
        handler = steps[step_id].on_error
        while handler:
            if handler in seen:
                raise InvalidDefinition(f"step {step_id}: on_error chain loops at {handler!r}")
            seen.add(handler)
            handler = steps[handler].on_error


def _check_acyclic(steps: dict[str, Step]) -> None:
    done: set[str] = set()
    for root in steps:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(steps[root].depends_on)]
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if dep in on_path:
                cycle = " -> ".join([*path[path.index(dep):], dep])
                raise InvalidDefinition(f"steps depend on each other in a cycle: {cycle}")
            if dep not in done:
                path.append(dep)
                on_path.add(dep)
                stack.append(iter(steps[dep].depends_on))


def parse_workflow(doc: dict[str, Any], *, tenant: str, principal: str, now: str) -> Workflow:
    """A definition a client saves: validated, owned by ``tenant``, stamped ``now``.

    A missing id gets a new uuid. ``org_id``, ``created_by`` and the times are the
    server's, whatever the document says.
    """
    if not isinstance(doc, dict):
        raise InvalidDefinition("a workflow definition must be a JSON object")
    try:
        wf = Workflow.model_validate(doc)
    except ValidationError as exc:
        raise InvalidDefinition(_describe(exc)) from None
    return wf.model_copy(update={
        "id": wf.id or str(uuid.uuid4()),
        "org_id": tenant,
        "created_by": principal,
        "created_at": now,
        "updated_at": now,
    })


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown field {where}"
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


# --------------------------------------------------------------------------- runs


@dataclass(slots=True)
class StepRun:
    """One step's state in a run (or one for_each/loop child's, under ``children``)."""

    step_id: str
    status: StepStatus = StepStatus.PENDING
    started_at: str | None = None
    completed_at: str | None = None
    next_attempt_at: str | None = None
    """When a delay or a retry backoff lets the step go on."""
    attempts: int = 0
    input: Any = None
    output: Any = None
    error: dict[str, Any] | None = None
    job_id: str = ""
    """The current attempt's job (a subworkflow step: the child run's id)."""
    item: Any = None
    children: dict[str, StepRun] | None = None
    resolved_items: list[Any] | None = None
    """The for_each items, evaluated once."""
    skip_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out = _fields_of(self)
        if self.children is not None:
            out["children"] = {k: c.to_json() for k, c in self.children.items()}
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRun:
        kw = _known(cls, d)
        kw["status"] = StepStatus(kw.get("status") or StepStatus.PENDING)
        if kw.get("children") is not None:
            kw["children"] = {k: cls.from_json(c) for k, c in kw["children"].items()}
        return cls(**kw)


def _empty_context() -> dict[str, Any]:
    return {"steps": {}}


@dataclass(slots=True)
class WorkflowRun:
    """One run of a definition; ``org_id`` is its tenant, checked on every read."""

    id: str
    workflow_id: str
    org_id: str
    team_id: str = ""
    input: Any = None
    context: dict[str, Any] = field(default_factory=_empty_context)
    """``{"steps": {<id>: {"result_ptr", "output"}}, ...output_path writes}``."""
    status: RunStatus = RunStatus.PENDING
    started_at: str = ""
    completed_at: str | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    steps: dict[str, StepRun] = field(default_factory=dict)
    total_cost: float = 0
    triggered_by: str = ""
    created_at: str = ""
    updated_at: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str = ""
    rerun_of: str = ""
    rerun_step: str = ""
    dry_run: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_RUN

    def to_json(self) -> dict[str, Any]:
        out = _fields_of(self)
        out["steps"] = {k: s.to_json() for k, s in self.steps.items()}
        # cordum-sdk 0.1.0 fails on "input": null and on a started_at that is no time;
        # left out, both read back as their defaults.
        if self.input is None:
            del out["input"]
        if not self.started_at:
            del out["started_at"]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkflowRun:
        kw = _known(cls, d)
        kw["status"] = RunStatus(kw.get("status") or RunStatus.PENDING)
        kw["steps"] = {k: StepRun.from_json(s) for k, s in (kw.get("steps") or {}).items()}
        kw["context"] = kw.get("context") or _empty_context()
        return cls(**kw)


@dataclass(slots=True)
class TimelineEvent:
    time: str
    type: str
    run_id: str
    workflow_id: str
    step_id: str = ""
    job_id: str = ""
    status: str = ""
    result_ptr: str = ""
    message: str = ""
    data: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Cordum's fields, plus ``timestamp`` (the same time): cordum-sdk reads that."""
        return {**_fields_of(self), "timestamp": self.time}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TimelineEvent:
        kw = _known(cls, d)
        kw.setdefault("time", d.get("timestamp") or "")
        return cls(**kw)


def _fields_of(obj: Any) -> dict[str, Any]:
    """A run dataclass as JSON-ready values (statuses as their text), one level deep."""
    out = {f.name: getattr(obj, f.name) for f in fields(obj)}
    if "status" in out and isinstance(out["status"], StrEnum):
        out["status"] = out["status"].value
    return out


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``d`` that are fields of ``cls``; keys written by other versions are
    dropped, missing ones take their defaults. JSON nulls for text fields read as ""."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        value = d[f.name]
        if value is None and f.default == "":
            value = ""
        out[f.name] = value
    return out
