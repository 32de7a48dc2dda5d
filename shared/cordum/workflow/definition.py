"""Workflow definitions: what clients send, validated once, when it is saved.

A definition is a pydantic model checked with Cordum's rules: ids, the dependency
graph (no missing step, no cycle, no looping ``on_error`` chain), policy gates and
bounds (docs/workflows.md describes the fields, docs/security.md "Workflow limits" the
bounds). Unknown keys are refused as Cordum refuses them, except the
few that cordum-sdk 0.1.0 sends on its own (a step's ``config``; ``retry`` as
``{max_attempts, backoff_sec}``), which are accepted. Runs of a definition live in
:mod:`cordum.workflow.model`.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cordum.labels import is_reserved_label
from cordum.workflow import json_schemas
from cordum.workflow.errors import InvalidDefinition
from cordum.workflow.model import parse_time

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_ID = 64
MAX_NAME = 256
MAX_TIMEOUT_S = 604800
"""A workflow's or step's ``timeout_sec`` is at most 7 days."""
POLICY_GATES = frozenset({"", "allow", "deny", "require_approval"})
SDK_STEP_KEYS = frozenset({"config"})
"""Keys cordum-sdk 0.1.0's WorkflowStep sends that Cordum's step has no field for."""


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


def check_step_count(wf: Workflow, limit: int) -> None:
    """InvalidDefinition when ``wf`` has more than ``limit`` steps (timeouts.yaml's
    ``limits.max_steps_per_definition``): checked on save and again on start, for a
    definition stored before the limit or under a higher one."""
    if len(wf.steps) > limit:
        raise InvalidDefinition(
            f"workflow {wf.id or '(new)'} has {len(wf.steps)} steps; a definition may have "
            f"at most {limit} (max_steps_per_definition)")


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
    _check_labels(wf)
    _check_schemas(wf)
    return wf.model_copy(update={
        "id": wf.id or str(uuid.uuid4()),
        "org_id": tenant,
        "created_by": principal,
        "created_at": now,
        "updated_at": now,
    })


def _check_labels(wf: Workflow) -> None:
    """A step's job labels pass the API's rule: none only the platform may set."""
    for step_id, step in wf.steps.items():
        named = [("route_labels", k) for k in step.route_labels]
        named += [("meta.labels", k) for k in (step.meta.labels if step.meta else {})]
        for where, name in named:
            if is_reserved_label(name):
                raise InvalidDefinition(f"steps.{step_id}.{where}: label {name!r} is "
                                        "reserved for the platform")


def _check_schemas(wf: Workflow) -> None:
    """Every schema of the definition is usable as :mod:`cordum.workflow.json_schemas`
    applies it: references inside it only, patterns RE2 compiles, valid for its draft."""
    found = [("input_schema", wf.input_schema)]
    for step_id, step in wf.steps.items():
        found += [(f"steps.{step_id}.input_schema", step.input_schema),
                  (f"steps.{step_id}.output_schema", step.output_schema)]
    for where, schema in found:
        problem = json_schemas.check_schema(schema, where) if schema is not None else ""
        if problem:
            raise InvalidDefinition(problem)


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown field {where}"
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
