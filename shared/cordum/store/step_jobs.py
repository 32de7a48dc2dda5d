"""Workflow step jobs: the ids the workflow engine owns, and its record of each one.

A step job's id is ``<run id>:<step path>@<attempt>`` (a for_each item's or a loop
iteration's path is ``<step>[i]``). The engine saves, with the run that sends it,
``wf:run:job:<job id>``: the job's tenant, run and step path, and the hash
(:func:`cordum.scheduler.jobhash.job_hash`) of the exact request it publishes. The
scheduler takes a request with a step job's id only when that record exists and
names the same tenant and hash: anyone can publish on ``sys.job.submit``, and a job
created first under a step's id (a forged approval gate, say) would otherwise be
taken for the step's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cordum.store.json_docs import json_object

KEY_PREFIX = "wf:run:job:"


def step_job_key(job_id: str) -> str:
    """``{"tenant", "run_id", "step_path", "request_hash"}`` of a step's job."""
    return KEY_PREFIX + job_id


def step_job_id(run_id: str, step_path: str, attempt: int) -> str:
    """``<run>:<step path>@<attempt>``: the one place a step job id is made."""
    return f"{run_id}:{step_path}@{attempt}"


def parse_step_job_id(job_id: str) -> tuple[str, str, int] | None:
    """(run id, step path, attempt) of a step job id; None for any other id."""
    run_id, sep, rest = job_id.partition(":")
    if not sep or not run_id:
        return None
    path, at, attempt = rest.rpartition("@")
    if not at or not path or not attempt.isdigit():
        return None
    return run_id, path, int(attempt)


@dataclass(frozen=True, slots=True)
class StepJobRecord:
    """What the engine recorded of a step job it sent."""

    tenant: str
    run_id: str
    step_path: str
    request_hash: str

    def to_json(self) -> str:
        return json.dumps({"tenant": self.tenant, "run_id": self.run_id,
                           "step_path": self.step_path, "request_hash": self.request_hash},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: Any) -> StepJobRecord | None:
        """The record, or None when ``raw`` is missing or not one."""
        doc = json_object(raw)
        if doc is None:
            return None
        return cls(str(doc.get("tenant", "")), str(doc.get("run_id", "")),
                   str(doc.get("step_path", "")), str(doc.get("request_hash", "")))
