"""The per-job stream's ``job.state``: the job as ``GET /api/v1/jobs/{id}`` serves it.

The one module of the stream that imports the gateway's job views. It builds the
detail with the gateway's own pieces (``job_detail`` and ``detail_extras``), in the
order ``JobService.get`` calls them, without its Lambda event or its submit
machinery: the result only through ``served_result_ptr``, inline up to the API's
``MAX_INLINE_RESULT_BYTES``, else by pointer only.
"""

from __future__ import annotations

from typing import Any

from cordum import protocol
from cordum.gateway.jobs.queries import detail_extras
from cordum.gateway.jobs.views import MAX_INLINE_RESULT_BYTES, job_detail, json_or_text
from cordum.store.jobs import meta_key
from cordum.store.results import served_result_ptr
from cordum.stream.frames import is_terminal
from cordum.text import as_text


async def job_view(redis: Any, job_id: str, *, output_policy: bool
                   ) -> tuple[dict[str, Any], bool]:
    """The job's detail, and whether the job has ended. Read when it is sent (after the
    stream registered for the job's events), so an end it does not show yet comes as
    an event."""
    raw = await redis.hgetall(meta_key(job_id))
    stored = {as_text(k): as_text(v) for k, v in raw.items()}
    result_ptr = served_result_ptr(job_id, stored, output_policy=output_policy)
    result: Any = None
    size: int | None = None
    if result_ptr:
        key = protocol.key_from_pointer(result_ptr)
        size = int(await redis.strlen(key))
        if size <= MAX_INLINE_RESULT_BYTES:
            raw = await redis.get(key)
            result = json_or_text(None if raw is None else as_text(raw))
    extras = await detail_extras(redis, job_id)
    view = job_detail(job_id, stored, result_ptr, result, extras, result_size=size)
    return view, is_terminal(stored)
