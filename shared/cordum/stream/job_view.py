"""The per-job stream's ``job.state``: the job as ``GET /api/v1/jobs/{id}`` serves it,
built by the gateway's own builder (``cordum.gateway.jobs.queries.job_view``). The one
module of the stream that imports the gateway's job pieces."""

from __future__ import annotations

from typing import Any

from cordum.gateway.jobs.queries import job_view as served_job
from cordum.store.jobs import meta_key
from cordum.stream.frames import is_terminal
from cordum.text import as_text


async def job_view(redis: Any, job_id: str, *, output_policy: bool
                   ) -> tuple[dict[str, Any], bool]:
    """The job's detail, and whether the job has ended. Read when it is sent (after the
    stream registered for the job's events), so an end it does not show yet comes as
    an event."""
    raw = await redis.hgetall(meta_key(job_id))
    stored = {as_text(k): as_text(v) for k, v in raw.items()}
    view = await served_job(redis, job_id, stored, output_policy=output_policy)
    return view, is_terminal(stored)
