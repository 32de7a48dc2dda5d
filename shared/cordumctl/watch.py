"""Following a job or a workflow run until it ends.

Both poll the API (there is no push channel): a job every ``poll_interval_s``, printing
a line per state change; a run likewise, drawn as a live tree of its steps on a
terminal and as a line per change elsewhere. Each returns the exit code of how the job
or run ended.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from cordumctl.errors import ApiError, ExitCode
from cordumctl.output import Format, age, duration, parse_time, shown
from cordumctl.states import APPROVAL_REQUIRED, JOB_ENDINGS, RUN_ENDINGS, styled

if TYPE_CHECKING:
    from cordumctl.session import Session


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def watch_job(s: Session, job_id: str, *, timeout_s: float | None = None,
              to_stderr: bool = False) -> tuple[ExitCode, dict[str, Any]]:
    """Poll the job; a line per state change (stderr when ``to_stderr``) until it ends."""
    console = s.err if to_stderr else s.console
    lines = s.format is Format.TABLE or to_stderr
    started = s.runtime.clock()
    last = ""
    job: dict[str, Any] = {}
    while True:
        job = s.client.get(f"/api/v1/jobs/{job_id}") or {}
        state = str(job.get("state") or "")
        if state != last:
            elapsed = duration(s.runtime.clock() - started)
            if lines:
                line = Text.assemble(f"{_now()}  ", shown(job_id), "  ", styled(state),
                                     f"  +{elapsed}")
                if state == APPROVAL_REQUIRED:
                    line.append(shown(f"  waiting for approval: cordumctl approvals approve "
                                      f"{job_id}"))
                elif state in JOB_ENDINGS and job.get("error"):
                    line.append(shown(f"  {job.get('error')}"))
                console.print(line, highlight=False)
            else:
                console.out(json.dumps({"job_id": job_id, "state": state, "elapsed": elapsed,
                                        "at": datetime.now(UTC).isoformat()}), highlight=False)
            last = state
        if state in JOB_ENDINGS:
            return JOB_ENDINGS[state], job
        if timeout_s is not None and s.runtime.clock() - started >= timeout_s:
            console.print(shown(f"still {state} after {duration(timeout_s)}"), highlight=False)
            return ExitCode.WATCH_TIMEOUT, job
        s.runtime.sleep(s.runtime.poll_interval_s)


def step_order(definition: dict[str, Any] | None, run: dict[str, Any]) -> list[str]:
    """The definition's step order, then any step the run has beyond it."""
    order = list((definition or {}).get("steps") or {})
    order += [step for step in run.get("steps") or {} if step not in order]
    return order


def step_line(step_id: str, step: dict[str, Any] | None, kind: str,
              now: datetime | None = None) -> Text:
    """``approve  approval  waiting  attempt 1  12.0s`` (how long it has run, or ran)."""
    step = step or {}
    status = str(step.get("status") or "pending")
    parts = [shown(step_id, "bold")]
    if kind:
        parts.append(shown(kind, "dim"))
    parts.append(styled(status))
    if step.get("attempts"):
        parts.append(shown(f"attempt {step['attempts']}"))
    started, ended = parse_time(step.get("started_at")), parse_time(step.get("completed_at"))
    if started is not None:
        until = ended or now or datetime.now(UTC)
        parts.append(Text(duration((until - started).total_seconds())))
    if step.get("next_attempt_at") and status not in ("succeeded", "failed"):
        parts.append(Text(f"retry in {_until(step['next_attempt_at'], now)}"))
    if step.get("job_id") and status in ("running", "waiting"):
        parts.append(shown(f"job {step['job_id']}", "dim"))
    if step.get("error"):
        error = step["error"]
        parts.append(shown(str(error.get("message") if isinstance(error, dict) else error),
                           "red"))
    return Text("  ").join(parts)


def _until(value: Any, now: datetime | None) -> str:
    when = parse_time(value)
    if when is None:
        return "-"
    return duration((when - (now or datetime.now(UTC))).total_seconds())


def run_tree(run: dict[str, Any], definition: dict[str, Any] | None,
             now: datetime | None = None) -> Tree:
    """The run and its steps (with their children) as a tree."""
    status = str(run.get("status") or "")
    took = age(run.get("started_at"), now)
    if run.get("completed_at"):
        started, ended = parse_time(run.get("started_at")), parse_time(run.get("completed_at"))
        if started and ended:
            took = duration((ended - started).total_seconds())
    tree = Tree(Text.assemble(shown(f"run {run.get('id', '')}", "bold"), "  ",
                              shown(str(run.get("workflow_id", ""))), "  ", styled(status),
                              f"  {took}"))
    steps = run.get("steps") or {}
    kinds = {k: str(v.get("type") or "") for k, v in ((definition or {}).get("steps") or {}).items()
             if isinstance(v, dict)}
    for step_id in step_order(definition, run):
        step = steps.get(step_id)
        branch = tree.add(step_line(step_id, step, kinds.get(step_id, ""), now))
        for child_id, child in ((step or {}).get("children") or {}).items():
            branch.add(step_line(child_id, child, "", now))
    for timer in run.get("timers") or []:
        tree.add(Text(f"timer fires in {duration((timer.get('remaining_ms') or 0) / 1000)}",
                      style="dim"))
    if run.get("error"):
        tree.add(shown(text_of(run["error"]), "red"))
    return tree


def text_of(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or json.dumps(error))
    return str(error)


def _fingerprint(run: dict[str, Any]) -> list[tuple[str, str, int]]:
    steps = run.get("steps") or {}
    return [("", str(run.get("status")), 0)] + [
        (k, str((v or {}).get("status")), int((v or {}).get("attempts") or 0))
        for k, v in steps.items()]


def definition_of(s: Session, run: dict[str, Any]) -> dict[str, Any] | None:
    """The run's workflow definition (for step order and kinds); None when it is gone."""
    if not run.get("workflow_id"):
        return None
    try:
        found = s.client.get(f"/api/v1/workflows/{run['workflow_id']}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found if isinstance(found, dict) else None


def watch_run(s: Session, run_id: str, *, timeout_s: float | None = None) -> ExitCode:
    """Poll the run until it ends: a live tree on a terminal, else a line per change."""
    run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    definition = definition_of(s, run)
    started = s.runtime.clock()
    live = s.format is Format.TABLE and s.console.is_terminal
    if live:
        with Live(run_tree(run, definition), console=s.console, auto_refresh=False,
                  transient=False) as view:
            while True:
                view.update(run_tree(run, definition), refresh=True)
                code = _ended(run, started, s, timeout_s)
                if code is not None:
                    return code
                s.runtime.sleep(s.runtime.poll_interval_s)
                run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    seen: dict[str, tuple[str, int]] = {}
    while True:
        _print_changes(s, run, seen)
        code = _ended(run, started, s, timeout_s)
        if code is not None:
            return code
        s.runtime.sleep(s.runtime.poll_interval_s)
        run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}


def _ended(run: dict[str, Any], started: float, s: Session,
           timeout_s: float | None) -> ExitCode | None:
    status = str(run.get("status") or "")
    if status in RUN_ENDINGS:
        return RUN_ENDINGS[status]
    if timeout_s is not None and s.runtime.clock() - started >= timeout_s:
        return ExitCode.WATCH_TIMEOUT
    return None


def _print_changes(s: Session, run: dict[str, Any], seen: dict[str, tuple[str, int]]) -> None:
    """One line (or one JSON object) per run status or step status/attempt change."""
    changes: list[tuple[str, str, int]] = []
    for key, status, attempts in _fingerprint(run):
        if seen.get(key) != (status, attempts):
            seen[key] = (status, attempts)
            changes.append((key, status, attempts))
    for key, status, attempts in changes:
        if s.format is Format.TABLE:
            what = f"step {key}" if key else f"run {run.get('id', '')}"
            tail = f"  attempt {attempts}" if attempts > 1 else ""
            s.console.print(Text.assemble(f"{_now()}  ", shown(what), "  ", styled(status), tail),
                            highlight=False)
        else:
            doc: dict[str, Any] = {"run_id": run.get("id"), "status": status}
            if key:
                doc = {"run_id": run.get("id"), "step_id": key, "status": status,
                       "attempts": attempts}
            s.console.out(json.dumps(doc), highlight=False)
