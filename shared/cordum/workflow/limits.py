"""Limits from ``timeouts.yaml``: per workflow (``workflows.<workflow id>``) and per run
(``limits``).

Cordum's timeouts file carries, per workflow, ``child_timeout_seconds`` (a step job's
deadline), ``total_timeout_seconds`` (the run's timeout) and ``max_retries`` (a step's
retry budget). Here they are defaults: what a definition says itself wins, and a
limit fills in only what it leaves at zero or unset:

- ``total_timeout_seconds`` -> the workflow's ``timeout_sec`` when it is 0;
- ``child_timeout_seconds`` -> ``timeout_sec`` of each step that runs a worker job and
  has none (never a delay, whose ``timeout_sec`` is its wait, nor an approval gate,
  which waits on a human);
- ``max_retries`` -> the ``retry`` of each such step that has none.

The ``limits`` section bounds what any run may hold, whatever its definition says
(:class:`RunLimits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError
from cordum.workflow.definition import MAX_TIMEOUT_S, RetryPolicy
from cordum.workflow.status import NO_JOB_KINDS, kind_of

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from cordum.workflow.definition import Workflow

NOT_A_JOB = NO_JOB_KINDS | {"approval"}
"""Step kinds that run no worker job of their own: no deadline or retry to fill in."""


@dataclass(frozen=True, slots=True)
class WorkflowLimits:
    child_timeout_s: int = 0
    total_timeout_s: int = 0
    max_retries: int = 0

    def apply(self, wf: Workflow) -> Workflow:
        """``wf`` with the limits filled in where it sets nothing (a new object)."""
        steps = {}
        for step_id, step in wf.steps.items():
            update: dict[str, Any] = {}
            if kind_of(step) not in NOT_A_JOB:
                if self.child_timeout_s and not step.timeout_sec:
                    update["timeout_sec"] = self.child_timeout_s
                if self.max_retries and step.retry is None:
                    update["retry"] = RetryPolicy(max_retries=self.max_retries)
            steps[step_id] = step.model_copy(update=update) if update else step
        update_wf: dict[str, Any] = {"steps": steps}
        if self.total_timeout_s and not wf.timeout_sec:
            update_wf["timeout_sec"] = self.total_timeout_s
        return wf.model_copy(update=update_wf)


def from_mapping(data: Any) -> dict[str, WorkflowLimits]:
    """The ``workflows`` section of a parsed timeouts.yaml; ConfigError when it is bad."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("timeouts.yaml: expected a mapping at the top")
    section = data.get("workflows")
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError("timeouts.yaml: workflows must be a mapping of workflow id -> limits")
    out: dict[str, WorkflowLimits] = {}
    for workflow_id, raw in section.items():
        if not isinstance(raw, dict):
            raise ConfigError(f"timeouts.yaml: workflows.{workflow_id} must be a mapping")
        unknown = set(raw) - {"child_timeout_seconds", "total_timeout_seconds", "max_retries"}
        if unknown:
            raise ConfigError(f"timeouts.yaml: workflows.{workflow_id}: unknown "
                              f"{', '.join(sorted(unknown))}")
        values = {}
        for key in ("child_timeout_seconds", "total_timeout_seconds", "max_retries"):
            value = raw.get(key) or 0
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"timeouts.yaml: workflows.{workflow_id}.{key} must be a "
                                  "whole number >= 0")
            if key != "max_retries" and value > MAX_TIMEOUT_S:
                raise ConfigError(f"timeouts.yaml: workflows.{workflow_id}.{key} must be at "
                                  f"most {MAX_TIMEOUT_S} (7 days)")
            values[key] = value
        out[str(workflow_id)] = WorkflowLimits(values["child_timeout_seconds"],
                                               values["total_timeout_seconds"],
                                               values["max_retries"])
    return out


def load(config_dir: Path) -> dict[str, WorkflowLimits]:
    from cordum.config import load_yaml

    path = config_dir / "timeouts.yaml"
    return from_mapping(load_yaml(path)) if path.exists() else {}


class LimitedDefinitions:
    """A run's definition with its workflow's limits applied, once per definition
    object (snapshots are parsed once per process, so each is applied once too)."""

    def __init__(self, limits: Mapping[str, WorkflowLimits] | None) -> None:
        self._limits = dict(limits or {})
        self._done: dict[int, tuple[Workflow, Workflow]] = {}

    def __call__(self, wf: Workflow) -> Workflow:
        limits = self._limits.get(wf.id)
        if limits is None:
            return wf
        hit = self._done.get(id(wf))
        if hit is not None and hit[0] is wf:
            return hit[1]
        if len(self._done) >= 64:
            self._done.clear()
        applied = limits.apply(wf)
        self._done[id(wf)] = (wf, applied)
        return applied


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Bounds on one run and the runs under it (``limits`` in timeouts.yaml). Redis runs
    ``noeviction`` and the run script decodes a whole run document on every read, so
    each bound is finite; a value must be a whole number >= 1."""

    max_steps_per_definition: int = 200
    """Steps of one definition; saving or starting a larger one is 400. Cordum's own
    examples use a handful; 200 is far above any hand-written flow, while one start
    (200 step states) and one nesting level (200 child runs) stay small."""
    max_run_input_bytes: int = 256 * 1024
    """A run's input as JSON (a start or rerun body: 400; a child run's input: its
    subworkflow step fails ``run_input_too_large``). The size of an output kept inline
    (256 KiB, ``steps.MAX_INLINE_OUTPUT``): what is larger belongs behind a pointer."""
    max_run_document_bytes: int = 4 * 1024 * 1024
    """A run document as stored (steps, outputs, context, pinned definitions). A run
    that would outgrow it fails ``run_too_large``; a start whose pinned definitions
    already do is 400. Sixteen inline outputs of the largest size fit; decoding 4 MiB
    takes the run script a few milliseconds per read."""
    max_runs_per_root: int = 1000
    """Child runs made under one root run, at any depth (counted in Redis per root run,
    kept as long as a run); a subworkflow step past it fails ``run_limit_exceeded``.
    The for_each fan-out limit (1000 items) applied to a tree of runs."""
    max_pinned_definitions: int = 64
    """Definitions a run pins for its subworkflow steps, at every depth below it; a start
    that would pin more is 400. Four times the nesting limit (16 levels)."""


_RUN_LIMIT_KEYS = tuple(RunLimits.__dataclass_fields__)


def run_limits_from_mapping(data: Any) -> RunLimits:
    """The ``limits`` section of a parsed timeouts.yaml (defaults for what it leaves out);
    ConfigError when it is bad."""
    if data is None:
        return RunLimits()
    if not isinstance(data, dict):
        raise ConfigError("timeouts.yaml: expected a mapping at the top")
    section = data.get("limits")
    if section is None:
        return RunLimits()
    if not isinstance(section, dict):
        raise ConfigError("timeouts.yaml: limits must be a mapping")
    unknown = set(section) - set(_RUN_LIMIT_KEYS)
    if unknown:
        raise ConfigError(f"timeouts.yaml: limits: unknown {', '.join(sorted(unknown))}")
    for key, value in section.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"timeouts.yaml: limits.{key} must be a whole number >= 1")
    return RunLimits(**section)


def load_run_limits(config_dir: Path) -> RunLimits:
    from cordum.config import load_yaml

    path = config_dir / "timeouts.yaml"
    return run_limits_from_mapping(load_yaml(path)) if path.exists() else RunLimits()
