"""Workflow step jobs: the engine's record of each one it sends, and a step job as the
job store holds it when its end is applied to its run.

A step job's id is ``<run id>:<step path>@<attempt>``, made and read by
:mod:`cordum.step_job_ids` only. The engine saves, with the run that sends it,
``wf:run:job:<job id>``: the job's tenant, run and step path, and the hash
(:func:`cordum.approval.job_hash`) of the exact request it publishes. The
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


@dataclass(frozen=True, slots=True)
class StoredJobEnd:
    """A step job as the job store holds it when its end is applied to its run: read by
    the run's own read (``workflow/lua/read_run.lua``) for one job, by
    :meth:`cordum.store.reads.JobReads.step_job_ends` for many."""

    meta: dict[str, str]
    """Its meta fields that were asked for (a field not set is left out)."""
    result: bytes | None
    """The result its ``result_ptr`` names, when not longer than asked for (the batched
    read leaves out one the API would not serve: the engine never looks at it)."""
    record: StepJobRecord | None
    """The engine's record of the job (None when there is none)."""
