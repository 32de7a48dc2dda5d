"""A run the workflow tick cannot advance: its failures counted, then its end.

The tick (:mod:`cordum.workflow.reconciler`) counts each tick in which a run's timer
fire or reconcile pass raised an unexpected exception in ``run_errors_key`` (INCR with
a TTL, so every Lambda instance adds to the same count), and deletes the count when a
pass over the run succeeds. At ``MAX_RUN_ERRORS`` the run is failed with
``engine_error`` under its lock (``WorkflowRunner.fail``): its open steps and their jobs
are cancelled as a cancel does, and its timeline says why.

When even that raises (the run's document does not decode, the definition breaks the
engine's close), the run is dropped from the tick's sets (the open runs, the timers,
its tenant's active runs) so it stops taking a turn and a concurrency slot; its
document is left as it is for an operator to read, with an event on its timeline and
an error in the log. Lock, retry and store errors are none of this: the next tick
tries again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.workflow import keys
from cordum.workflow.model import TimelineEvent, format_time
from cordum.workflow.redis_io import dumps, execute

if TYPE_CHECKING:
    from collections.abc import Iterable

    from cordum.workflow.redis_io import RedisWorkflowProtocol

MAX_RUN_ERRORS = 5
"""Consecutive ticks in which a run raised before it is failed with ``engine_error``:
enough to ride out a passing fault (a bad deploy rolled back within the minute), few
enough that a run the engine cannot advance ends within a minute (ticks are 10 s apart)."""
ENGINE_ERROR = "engine_error"
MAX_MESSAGE = 300
"""The exception's type and text are cut to this many characters in the run's error."""


def engine_error(exc: BaseException) -> dict[str, Any]:
    """The run's error once it is failed for ``exc``: its type and text, bounded."""
    try:
        message = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose text itself raises
        message = type(exc).__name__
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 3] + "..."
    return {"code": ENGINE_ERROR, "message": message, "step_id": ""}


class RunErrors:
    """The tick's failure counts on Redis, and its last resort for a run."""

    def __init__(self, redis: RedisWorkflowProtocol) -> None:
        self._redis = redis

    async def record(self, run_id: str) -> int:
        """One more failed tick of the run; the count so far."""
        key = keys.run_errors_key(run_id)
        pipe = self._redis.pipeline(transaction=True)
        pipe.incr(key).expire(key, keys.RUN_ERRORS_TTL_S)
        count, _ = await execute(f"count errors of run {run_id}", pipe)
        return int(count)

    async def clear(self, run_ids: Iterable[str]) -> None:
        """Forget the counts of runs a pass went over without raising (one command)."""
        doomed = [keys.run_errors_key(r) for r in run_ids]
        if doomed:
            await execute("clear run errors", self._redis.pipeline(
                transaction=False).delete(*doomed))

    async def drop(self, run_id: str, *, tenant: str, workflow_id: str,
                   error: dict[str, Any]) -> None:
        """Take the run out of the tick's sets (and, when its tenant is known, out of the
        tenant's active runs); the timer goes when its workflow is known. Its document
        stays as it is; its timeline gets a ``run_dropped`` event."""
        stamp = format_time(datetime.now(UTC))
        event = TimelineEvent(time=stamp, type="run_dropped", run_id=run_id,
                              workflow_id=workflow_id,
                              message=f"{error['code']}: {error['message']}; the run "
                                      "could not be failed and is no longer reconciled")
        pipe = self._redis.pipeline(transaction=True)
        pipe.zrem(keys.OPEN_RUNS_KEY, run_id)
        if workflow_id:
            pipe.zrem(keys.TIMERS_KEY, keys.timer_member(workflow_id, run_id))
        if tenant:
            pipe.srem(keys.active_runs_key(tenant), run_id)
        pipe.rpush(keys.timeline_key(run_id), dumps(event.to_json()))
        pipe.delete(keys.run_errors_key(run_id))
        await execute(f"drop run {run_id}", pipe)
