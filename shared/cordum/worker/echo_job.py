"""What the echo worker does with one job: echo its context back, or fail as asked.

Labels steer it for tests: ``echo.sleep_ms`` delays the result, ``echo.fail``
(``fatal`` | ``retryable``) returns FAILED_FATAL / FAILED_RETRYABLE.

A context that names an artifact (``artifact_ptr``, at the top of the payload or in the
submitted ``context`` object, where an HTTP submit puts the caller's) has it read, as
the job's tenant, and echoed under ``artifact`` (``cordum.worker.artifacts``): whole
when small, by its size and digest otherwise.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from cordum.protocol import JobRequest, JobResult, JobStatus, key_from_pointer, pointer, result_key
from cordum.worker.artifacts import ArtifactUnreadable, read_artifact

if TYPE_CHECKING:
    import redis.asyncio

LABEL_SLEEP_MS = "echo.sleep_ms"
LABEL_FAIL = "echo.fail"

ERROR_INVALID_INPUT = "invalid_input"
RESULT_TTL_S = 86_400

_ERROR_CODE_JOB_INVALID_INPUT = 203  # ErrorCode.ERROR_CODE_JOB_INVALID_INPUT


def failed(req: JobRequest, status: int, code: str, message: str, *, enum: int = 0) -> JobResult:
    return JobResult(
        job_id=req.job_id,
        status=status,
        error_code=code,
        error_message=message,
        error_code_enum=enum,
    )


def _invalid_input(req: JobRequest, message: str) -> JobResult:
    return failed(
        req,
        JobStatus.JOB_STATUS_FAILED,
        ERROR_INVALID_INPUT,
        message,
        enum=_ERROR_CODE_JOB_INVALID_INPUT,
    )


async def echo(req: JobRequest, redis: redis.asyncio.Redis, worker_id: str) -> JobResult:
    """Echo the job's context back as its result."""
    labels = req.labels
    if LABEL_SLEEP_MS in labels:
        try:
            sleep_ms = int(labels[LABEL_SLEEP_MS])
            if sleep_ms < 0:
                raise ValueError("negative")
        except ValueError:
            return _invalid_input(
                req, f"label {LABEL_SLEEP_MS}={labels[LABEL_SLEEP_MS]!r} is not an integer >= 0"
            )
        await asyncio.sleep(sleep_ms / 1000)
    fail = labels.get(LABEL_FAIL, "")
    if fail == "fatal":
        return failed(
            req, JobStatus.JOB_STATUS_FAILED_FATAL, "echo_fail", "fatal failure requested"
        )
    if fail == "retryable":
        return failed(
            req,
            JobStatus.JOB_STATUS_FAILED_RETRYABLE,
            "echo_fail",
            "retryable failure requested",
        )
    if fail:
        return _invalid_input(req, f"label {LABEL_FAIL}={fail!r}: want fatal or retryable")

    if not req.context_ptr:
        return _invalid_input(req, "context_ptr is empty")
    key = key_from_pointer(req.context_ptr)
    try:
        raw = await redis.get(key)
    except Exception as exc:
        return failed(
            req,
            JobStatus.JOB_STATUS_FAILED_RETRYABLE,
            "context_unavailable",
            f"reading {key}: {type(exc).__name__}: {exc}",
        )
    if raw is None:
        return _invalid_input(req, f"context {key} not found")
    try:
        context = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return _invalid_input(req, f"context {key} is not JSON: {exc}")

    answer = {"echo": context, "worker_id": worker_id, "job_id": req.job_id}
    named = _artifact_named(context)
    if isinstance(named, str) and named:
        try:
            artifact = await read_artifact(redis, named, req.tenant_id)
        except ArtifactUnreadable as exc:
            if exc.retryable:
                return failed(req, JobStatus.JOB_STATUS_FAILED_RETRYABLE,
                              "artifact_unavailable", str(exc))
            return _invalid_input(req, str(exc))
        answer["artifact"] = artifact.echo()
    body = json.dumps(answer)
    res_key = result_key(req.job_id)
    try:
        await redis.set(res_key, body, ex=RESULT_TTL_S)
    except Exception as exc:
        return failed(
            req,
            JobStatus.JOB_STATUS_FAILED_RETRYABLE,
            "result_store_failed",
            f"writing {res_key}: {type(exc).__name__}: {exc}",
        )
    return JobResult(
        job_id=req.job_id,
        status=JobStatus.JOB_STATUS_SUCCEEDED,
        result_ptr=pointer(res_key),
    )


def _artifact_named(context: object) -> str | None:
    """The artifact pointer a job's payload names: its own ``artifact_ptr``, else that of
    the caller's ``context`` object (``{"prompt", "topic", "context": {...}}``)."""
    if not isinstance(context, dict):
        return None
    named = context.get("artifact_ptr")
    inner = context.get("context")
    if named is None and isinstance(inner, dict):
        named = inner.get("artifact_ptr")
    return named if isinstance(named, str) else None
