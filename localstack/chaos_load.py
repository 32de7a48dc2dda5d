"""The chaos suite's steady load and its accounting (see chaos.py).

:class:`Load` submits jobs over the REST API at a fixed rate from a thread pool and
records, per request, when it was sent, what the client saw (a status code, or
``timeout`` / ``error``) and the job id of an accepted one. :func:`account` reads
every accepted job's end from Redis and the worker's receipts file, and makes one
:class:`Row` of RELIABILITY.md of it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "DENIED",
                      "OUTPUT_QUARANTINED"})
REQUEST_TIMEOUT_S = 30.0
WORKFLOW_EVERY = 8
"""One tick in this many starts a workflow run (a for_each over two echo items)."""
RUN_TERMINAL = frozenset({"succeeded", "failed", "denied", "cancelled", "timed_out"})
WORKFLOW = {"name": "chaos: two echo items", "steps": {
    "fan": {"topic": "job.echo", "for_each": "input.items", "max_parallel": 2,
            "input": {"item": "${item}"}}}}
"""The definition the load runs (its id is the suite's)."""


@dataclass(slots=True)
class Sent:
    at: float
    status: str
    """The HTTP status as text, or ``timeout`` / ``error``."""
    job_id: str = ""
    retry_after: str = ""


@dataclass
class Load:
    """Jobs on ``job.echo`` at ``rate`` per second until :meth:`stop`."""

    api_url: str
    api_key: str
    tenant: str
    rate: float
    tag: str
    sleep_ms: int = 200
    workflow_id: str = ""
    """A workflow to start a run of every WORKFLOW_EVERY-th tick instead of a job."""
    sent: list[Sent] = field(default_factory=list)
    runs: list[Sent] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(8, int(self.rate * 4)))
        self._thread = threading.Thread(target=self._pace, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No new requests; waits for the ones in flight (each bounded by its timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _pace(self) -> None:
        assert self._pool is not None
        n = 0
        start = time.monotonic()
        while not self._stop.is_set():
            self._pool.submit(self._submit, n)
            n += 1
            wait = start + n / self.rate - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)

    def _submit(self, n: int) -> None:
        if self.workflow_id and n % WORKFLOW_EVERY == WORKFLOW_EVERY - 1:
            self._post(f"/api/v1/workflows/{self.workflow_id}/runs",
                       {"items": [f"{self.tag}-{n}-a", f"{self.tag}-{n}-b"]}, n, "run_id",
                       self.runs)
            return
        body = {"topic": "job.echo", "prompt": f"chaos {self.tag} #{n}",
                "labels": {"echo.sleep_ms": str(self.sleep_ms), "chaos": self.tag}}
        self._post("/api/v1/jobs", body, n, "job_id", self.sent)

    def _post(self, path: str, body: dict[str, Any], n: int, id_field: str,
              into: list[Sent]) -> None:
        req = urllib.request.Request(
            f"{self.api_url}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"X-API-Key": self.api_key, "X-Tenant-ID": self.tenant,
                     "Content-Type": "application/json",
                     "Idempotency-Key": f"chaos-{self.tag}-{n}"})
        at = time.time()
        sent = Sent(at=at, status="error")
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
                sent.status = str(resp.status)
                sent.job_id = str(json.loads(resp.read() or b"{}").get(id_field) or "")
        except urllib.error.HTTPError as exc:
            sent.status = str(exc.code)
            sent.retry_after = exc.headers.get("Retry-After") or ""
        except TimeoutError:
            sent.status = "timeout"
        except (urllib.error.URLError, OSError) as exc:
            sent.status = "timeout" if "timed out" in str(exc) else "error"
        with self._lock:
            into.append(sent)

    def accepted(self) -> list[Sent]:
        return [s for s in self.sent if s.status == "200" and s.job_id]

    def accepted_runs(self) -> list[str]:
        return [s.job_id for s in self.runs if s.status == "200" and s.job_id]


@dataclass(frozen=True, slots=True)
class End:
    """A job as the store holds it: its state, the reason it failed, and when it last
    changed (unix s; for a terminal job, when it ended)."""

    state: str = ""
    reason: str = ""
    at: float = 0.0
    dispatches: int = 0
    """How many times the platform dispatched it (DISPATCHED in its events)."""


def states(redis: Any, job_ids: list[str]) -> dict[str, End]:
    """job id -> its :class:`End` (an empty one when the store does not know the job)."""
    from cordum.store.jobs import events_key, meta_key

    out: dict[str, End] = {}
    for i in range(0, len(job_ids), 500):
        chunk = job_ids[i:i + 500]
        pipe = redis.pipeline(transaction=False)
        for job_id in chunk:
            pipe.hmget(meta_key(job_id), "state", "failure_reason", "output_safety",
                       "updated_at")
            pipe.lrange(events_key(job_id), 0, -1)
        replies = pipe.execute()
        for job_id, (state, reason, output, updated), events in zip(
                chunk, replies[::2], replies[1::2], strict=True):
            out[job_id] = End((state or b"").decode(),
                              (reason or b"").decode() or _output_reason(output),
                              int(updated or 0) / 1_000_000,
                              sum(b'"state":"DISPATCHED"' in e for e in events))
    return out


def _output_reason(raw: bytes | None) -> str:
    """A quarantined job's reason: the output decision's, stored as JSON."""
    try:
        return str(json.loads(raw).get("reason") or "") if raw else ""
    except (ValueError, AttributeError):
        return ""


def run_statuses(redis: Any, run_ids: list[str]) -> dict[str, str]:
    """run id -> its status as the workflow store holds it ('' when absent)."""
    from cordum.workflow.keys import run_key

    pipe = redis.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.get(run_key(run_id))
    out = {}
    for run_id, raw in zip(run_ids, pipe.execute(), strict=True):
        out[run_id] = str(json.loads(raw).get("status") or "") if raw else ""
    return out


def settle(redis: Any, job_ids: list[str], timeout_s: float, progress: Any = None,
           run_ids: list[str] | None = None,
           ) -> tuple[dict[str, End], dict[str, str]]:
    """Waits until every job and run is terminal (or the time is up); their ends."""
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while True:
        ends = states(redis, job_ids)
        runs = run_statuses(redis, run_ids or [])
        open_ = [j for j, end in ends.items() if end.state not in TERMINAL]
        open_runs = [r for r, status in runs.items() if status not in RUN_TERMINAL]
        if (not open_ and not open_runs) or time.monotonic() >= deadline:
            return ends, runs
        if progress is not None and time.monotonic() - last_report >= 15:
            progress(f"{len(open_)} of {len(job_ids)} jobs and {len(open_runs)} of "
                     f"{len(runs)} runs still open")
            last_report = time.monotonic()
        time.sleep(1.0)


def timeline(redis: Any, job_id: str, since: float) -> str:
    """A job's states with their times after ``since`` (unix s), for a note."""
    from cordum.store.jobs import events_key

    steps = []
    for raw in redis.lrange(events_key(job_id), 0, -1):
        event = json.loads(raw)
        steps.append(f"{event.get('state')} {int(event.get('ts', 0)) / 1e6 - since:+.1f} s")
    return ", ".join(steps)


def receipts(path: Path, since_line: int = 0) -> Counter[str]:
    """How many times each job id reached the worker (lines after ``since_line``). A
    ``<job id> retry`` line (the worker answered FAILED_RETRYABLE) is no delivery: the
    dispatch that follows is in the job's events, as every dispatch is."""
    if not path.exists():
        return Counter()
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    seen: Counter[str] = Counter()
    for line in lines[since_line:]:
        job_id, _, note = line.strip().partition(" ")
        if job_id and note != "retry":
            seen[job_id] += 1
    return seen


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


@dataclass
class Row:
    fault: str
    accepted: int
    succeeded: int
    other: dict[str, int]
    """``STATE: reason`` -> count, for jobs that ended otherwise."""
    still_open: dict[str, int]
    """state -> count, for jobs not terminal when the wait ran out."""
    twice: int
    """Accepted jobs that reached the worker more often than they were dispatched."""
    lost: int
    """Accepted jobs the store does not know at all."""
    recovery_s: float | None
    """From the fault to the end of the first job sent after it that succeeded."""
    client_saw: dict[str, int]
    retry_after: bool
    """Every 503 and 429 carried Retry-After."""
    notes: list[str] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)
    """Workflow runs started: accepted, and how many ended in each status ('open' if not)."""
    sent_again: int = 0
    """Accepted jobs dispatched more than once (a lost worker or dispatch, a retry)."""
    slowest_s: float | None = None
    """The longest from a job's submission, or the fault if later, to its end."""
    slowest_job: str = ""

    @property
    def clean(self) -> bool:
        return (not self.still_open and not self.twice and not self.lost
                and not self.runs.get("open") and not self.runs.get("lost"))


def account(fault: str, load: Load | None, extra_ids: list[str],
            ends: dict[str, End], seen: Counter[str], fault_at: float,
            run_ends: dict[str, str] | None = None) -> Row:
    """One RELIABILITY.md row from the load (if any), extra jobs the fault made itself,
    their ends and the worker's receipts."""
    sent = load.sent if load is not None else []
    accepted = [s.job_id for s in (load.accepted() if load is not None else [])] + extra_ids
    other: Counter[str] = Counter()
    still_open: Counter[str] = Counter()
    lost = 0
    for job_id in accepted:
        end = ends.get(job_id, End())
        state, reason = end.state, end.reason
        if not state:
            lost += 1
        elif state not in TERMINAL:
            still_open[state] += 1
        elif state != "SUCCEEDED":
            other[f"{state}: {reason or 'no reason'}"] += 1
    succeeded = sum(1 for j in accepted if ends.get(j, End()).state == "SUCCEEDED")
    twice = sum(1 for j in accepted if seen.get(j, 0) > max(1, ends.get(j, End()).dispatches))
    sent_again = sum(1 for j in accepted if ends.get(j, End()).dispatches > 1)
    began = {s.job_id: max(s.at, fault_at) for s in sent if s.status == "200"}
    took = [(end.at - began.get(j, fault_at), j) for j in accepted
            if (end := ends.get(j, End())).state in TERMINAL]
    slowest = max(took) if took else None
    after = sorted(ends[s.job_id].at for s in sent if s.at >= fault_at and s.status == "200"
                   and ends.get(s.job_id, End()).state == "SUCCEEDED")
    refused = [s for s in sent + (load.runs if load is not None else [])
               if s.status in ("429", "503")]
    runs: Counter[str] = Counter()
    for run_id in (load.accepted_runs() if load is not None else []):
        status = (run_ends or {}).get(run_id, "")
        runs["accepted"] += 1
        runs["lost" if not status else status if status in RUN_TERMINAL else "open"] += 1
    return Row(fault=fault, accepted=len(accepted), succeeded=succeeded, other=dict(other),
               still_open=dict(still_open), twice=twice, lost=lost,
               sent_again=sent_again, slowest_s=slowest[0] if slowest else None,
               slowest_job=slowest[1] if slowest else "",
               recovery_s=(after[0] - fault_at) if after else None,
               client_saw=dict(Counter(s.status for s in sent)),
               retry_after=all(s.retry_after for s in refused), runs=dict(runs))
