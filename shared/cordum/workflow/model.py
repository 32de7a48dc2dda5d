"""Workflow runs: their statuses, steps and timeline (the engine's state, stored as JSON).

A run is plain dataclasses: the engine mutates it in place and the store writes it
whole, so it stays cheap to copy and free of validation on every step. The
definition a run is made from lives in :mod:`cordum.workflow.definition`.

Times in run, step and timeline JSON are RFC 3339 UTC strings ending in ``Z``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


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


GATE_WAITING = "waiting"
GATE_PASSED = "passed"


def format_time(instant: datetime) -> str:
    """``2026-11-26T08:00:00.123456Z``; a naive ``instant`` is taken as UTC."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (``Z`` or an offset); naive is UTC. ValueError when it is none."""
    instant = datetime.fromisoformat(text.strip())
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


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
    gate: str = ""
    """A ``policy_gate: require_approval`` step's gate: "", ``waiting`` or ``passed``."""
    resends: int = 0
    """Times the current job was sent again because the job store never saw it."""
    gate_input_hash: str = ""
    """A policy-gated step's input as its approver saw it (SHA-256, ``gates.input_hash``):
    the step's job carries that input or the step fails."""

    def to_json(self) -> dict[str, Any]:
        out = _fields_of(self)
        if not self.gate:
            del out["gate"]
        if not self.gate_input_hash:
            del out["gate_input_hash"]
        if not self.resends:
            del out["resends"]
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
    child_definitions: dict[str, Any] | None = None
    """The definitions its subworkflow steps may start (at any depth), as they were when
    the run was created: workflow id -> definition JSON (:mod:`cordum.workflow.pinning`).
    None for a run with no subworkflow step (or one stored before runs pinned them)."""

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
        if self.child_definitions is None:
            del out["child_definitions"]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkflowRun:
        kw = _known(cls, d)
        kw["status"] = RunStatus(kw.get("status") or RunStatus.PENDING)
        kw["steps"] = {k: StepRun.from_json(s) for k, s in (kw.get("steps") or {}).items()}
        kw["context"] = kw.get("context") or _empty_context()
        return cls(**kw)


def step_runs(run: WorkflowRun) -> Iterator[tuple[str, StepRun]]:
    """Every step's state with its path: the steps, then each for_each item and loop
    iteration (``<step>[i]``) under its parent."""
    for step_id, sr in run.steps.items():
        yield step_id, sr
        yield from (sr.children or {}).items()


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
    out = {name: getattr(obj, name) for name, _ in _field_table(type(obj))}
    if "status" in out and isinstance(out["status"], StrEnum):
        out["status"] = out["status"].value
    return out


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``d`` that are fields of ``cls``; keys written by other versions are
    dropped, missing ones take their defaults. JSON nulls for text fields read as ""."""
    out: dict[str, Any] = {}
    for name, text_default in _field_table(cls):
        if name not in d:
            continue
        value = d[name]
        if value is None and text_default:
            value = ""
        out[name] = value
    return out


_FIELD_TABLES: dict[type, tuple[tuple[str, bool], ...]] = {}


def _field_table(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, whether its default is "") of each field of a run dataclass, read once per
    class: ``dataclasses.fields`` rebuilds its tuple on every call, and a run's steps
    are read and written on every event."""
    table = _FIELD_TABLES.get(cls)
    if table is None:
        table = tuple((f.name, f.default == "") for f in fields(cls))
        _FIELD_TABLES[cls] = table
    return table
