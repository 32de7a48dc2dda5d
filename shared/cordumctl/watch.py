"""Following a job or a workflow run until it ends.

A job is shown as a line per state change; a run as a live tree of its steps on a
terminal and as a line per change elsewhere. Each returns the exit code of how the job
or run ended.

What is shown always comes from the API's own answers (``GET`` of the job or run). When
the live event stream (:mod:`cordumctl.stream`) is served, those reads follow its
events: a job's own stream (``job.state`` is shown as it comes; another event of the job
reads it again), or the tenant's stream filtered to the run's ``workflow.run`` events
(each read the run again); the watch ends with the event that ends the job or run, without
polling. When it is not served (404, refused, not SSE), or breaks beyond its reconnections,
or ends before the job or run did, the watch polls every ``poll_interval_s`` as it always
did, from where it was. The output and exit codes are the same either way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from cordumctl.errors import ApiError, CliError, ExitCode
from cordumctl.output import Format, age, duration, parse_time, shown
from cordumctl.states import APPROVAL_REQUIRED, JOB_ENDINGS, RUN_ENDINGS, styled
from cordumctl.stream import STREAM_PATH, Event, Feed, job_stream_path

if TYPE_CHECKING:
    from cordumctl.session import Session

JOB_STATE = "job.state"
WORKFLOW_RUN = "workflow.run"
_NOT_ABOUT_THE_JOB = frozenset({"worker.heartbeat", "system.alert"})


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def open_feed(s: Session, path: str, params: Mapping[str, str | None] | None = None, *,
              end_is_final: bool = False) -> Feed | None:
    """The stream's events, read in the background; ``None`` when it cannot be opened
    (not served, refused, not SSE, or an error of its own): the caller polls."""
    stream = s.stream(path, params, end_is_final=end_is_final)
    try:
        stream.open()
    except CliError:
        stream.close()
        return None
    return Feed(stream)


class Source:
    """The next versions of a job or run: read again when its events say it changed,
    polled when there are no events to follow.

    ``reads(event, current)`` says whether an event calls for a read; ``doc_of`` gives a
    version an event carries whole (``job.state``); ``claims_end`` says an event reports
    the end, and ``ends`` whether a version is ended: a read that disagrees with such an
    event turns to polling, which will see the end.
    """

    def __init__(self, s: Session, path: str, feed: Feed | None, *,
                 deadline: float | None = None, tick_s: float | None = None,
                 reads: Callable[[Event, dict[str, Any]], bool] = lambda _e, _c: True,
                 doc_of: Callable[[Event], dict[str, Any] | None] = lambda _e: None,
                 claims_end: Callable[[Event], bool] = lambda _e: False,
                 ends: Callable[[dict[str, Any]], bool] = lambda _d: False) -> None:
        self.s = s
        self.path = path
        self.feed = feed
        self.deadline = deadline
        self.tick_s = tick_s
        self.deadline_passed = False
        """The last wait ran to the deadline (the clock may be a test's, which waits do
        not move)."""
        self._reads, self._doc_of = reads, doc_of
        self._claims_end, self._ends = claims_end, ends
        self._active = time.monotonic()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *_: object) -> None:
        self.poll()

    def poll(self) -> None:
        """Stop following the stream: from now on, poll."""
        if self.feed is not None:
            self.feed.stop()
            self.feed = None

    def read(self) -> dict[str, Any]:
        self._active = time.monotonic()
        found = self.s.client.get(self.path)
        return found if isinstance(found, dict) else {}

    def first(self) -> list[dict[str, Any]]:
        """The first versions to show (at least one)."""
        if self.feed is None:
            return [self.read()]
        return self.next({}) or [self.read()]

    def next(self, current: dict[str, Any]) -> list[dict[str, Any]]:
        """The versions since ``current``, in order; ``[]`` when nothing came before the
        next redraw (``tick_s``) or the deadline."""
        if self.feed is None:
            self.s.runtime.sleep(self.s.runtime.poll_interval_s)
            return [self.read()]
        remaining = None if self.deadline is None else self.deadline - self.s.runtime.clock()
        idle = self.s.runtime.stream_idle_reread_s - (time.monotonic() - self._active)
        wait = min(w for w in (remaining, idle, self.tick_s) if w is not None)
        events = self.feed.take(max(0.0, wait))
        docs: list[dict[str, Any]] = []
        read = claimed = False
        for event in events:
            self._active = time.monotonic()
            doc = self._doc_of(event)
            if doc is not None:
                docs.append(doc)
                read = False
            elif self._reads(event, docs[-1] if docs else current):
                read = True
            claimed = claimed or self._claims_end(event)
        finished = self.feed.finished
        if finished:
            self.poll()
        if read or finished or (not events and idle <= wait):
            docs.append(self.read())
        elif not events and remaining is not None and remaining <= wait:
            self.deadline_passed = True
        if claimed and not self._ends(docs[-1] if docs else current):
            self.poll()
        return docs


def _job_reads(event: Event, job: dict[str, Any]) -> bool:
    """Whether an event of the job's stream may have moved it (progress only the first
    time: the job is RUNNING while it reports progress)."""
    if event.type == "job.progress":
        return str(job.get("state") or "") != "RUNNING"
    return event.type not in _NOT_ABOUT_THE_JOB


def _job_state(event: Event) -> dict[str, Any] | None:
    return (event.doc() or None) if event.type == JOB_STATE else None


class _JobLines:
    """A line (or a JSON object) per state change of a watched job."""

    def __init__(self, s: Session, job_id: str, to_stderr: bool) -> None:
        self.s = s
        self.job_id = job_id
        self.console = s.err if to_stderr else s.console
        self.lines = s.format is Format.TABLE or to_stderr
        self.started = s.runtime.clock()
        self.last = ""

    def show(self, job: dict[str, Any]) -> ExitCode | None:
        """Print the job if its state changed; how it ended, once it has."""
        job_id, s = self.job_id, self.s
        state = str(job.get("state") or "")
        if state != self.last:
            elapsed = duration(s.runtime.clock() - self.started)
            if self.lines:
                line = Text.assemble(f"{_now()}  ", shown(job_id), "  ", styled(state),
                                     f"  +{elapsed}")
                if state == APPROVAL_REQUIRED:
                    line.append(shown(f"  waiting for approval: cordumctl approvals approve "
                                      f"{job_id}"))
                elif state in JOB_ENDINGS and job.get("error"):
                    line.append(shown(f"  {job.get('error')}"))
                self.console.print(line, highlight=False)
            else:
                self.console.out(json.dumps({"job_id": job_id, "state": state,
                                             "elapsed": elapsed,
                                             "at": datetime.now(UTC).isoformat()}),
                                 highlight=False)
            self.last = state
        return JOB_ENDINGS.get(state)


def watch_job(s: Session, job_id: str, *, timeout_s: float | None = None,
              to_stderr: bool = False) -> tuple[ExitCode, dict[str, Any]]:
    """Follow the job (its stream, else polling); a line per state change (stderr when
    ``to_stderr``) until it ends."""
    feed = open_feed(s, job_stream_path(job_id), end_is_final=True)
    view = _JobLines(s, job_id, to_stderr)
    deadline = None if timeout_s is None else view.started + timeout_s
    job: dict[str, Any] = {}
    with Source(s, f"/api/v1/jobs/{job_id}", feed, deadline=deadline, reads=_job_reads,
                doc_of=_job_state) as source:
        docs = source.first()
        while True:
            for job in docs:
                code = view.show(job)
                if code is not None:
                    return code, job
            if timeout_s is not None and (source.deadline_passed
                                          or s.runtime.clock() - view.started >= timeout_s):
                state = str(job.get("state") or "")
                view.console.print(shown(f"still {state} after {duration(timeout_s)}"),
                                   highlight=False)
                return ExitCode.WATCH_TIMEOUT, job
            docs = source.next(job)


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


def _run_ended(run: dict[str, Any]) -> bool:
    return str(run.get("status") or "") in RUN_ENDINGS


def _claims_run_end(event: Event) -> bool:
    return event.type == WORKFLOW_RUN and str(event.doc().get("status") or "") in RUN_ENDINGS


def watch_run(s: Session, run_id: str, *, timeout_s: float | None = None) -> ExitCode:
    """Follow the run (the stream's ``workflow.run`` events, else polling) until it ends:
    a live tree on a terminal, else a line per change."""
    # The stream first: an event sent between the first read and the subscription would
    # be lost the other way round.
    feed = open_feed(s, STREAM_PATH, {"types": WORKFLOW_RUN, "run_id": run_id})
    live = s.format is Format.TABLE and s.console.is_terminal
    with Source(s, f"/api/v1/workflow-runs/{run_id}", feed,
                tick_s=s.runtime.poll_interval_s if live else None,
                claims_end=_claims_run_end, ends=_run_ended) as source:
        run = source.read()
        definition = definition_of(s, run)
        started = s.runtime.clock()
        if timeout_s is not None:
            source.deadline = started + timeout_s
        if live:
            with Live(run_tree(run, definition), console=s.console, auto_refresh=False,
                      transient=False) as view:
                while True:
                    view.update(run_tree(run, definition), refresh=True)
                    code = _ended(run, started, s, timeout_s, source)
                    if code is not None:
                        return code
                    run = ([run] + source.next(run))[-1]
        seen: dict[str, tuple[str, int]] = {}
        while True:
            _print_changes(s, run, seen)
            code = _ended(run, started, s, timeout_s, source)
            if code is not None:
                return code
            run = ([run] + source.next(run))[-1]


def _ended(run: dict[str, Any], started: float, s: Session,
           timeout_s: float | None, source: Source) -> ExitCode | None:
    status = str(run.get("status") or "")
    if status in RUN_ENDINGS:
        return RUN_ENDINGS[status]
    if timeout_s is not None and (source.deadline_passed
                                  or s.runtime.clock() - started >= timeout_s):
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
