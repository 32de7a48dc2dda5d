"""Pages of a tenant's workflow runs, newest first, behind an opaque cursor.

The listing walks a runs index (by tenant, or by tenant and workflow; keys in
:mod:`cordum.workflow.keys`) from its newest score down, reading each run to filter
it by tenant, workflow and status. The cursor is ``"<score>:<run id>"`` of the last
run looked at.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cordum.store.indexes import normalize_cutoff_us
from cordum.text import as_text
from cordum.workflow import keys
from cordum.workflow.errors import InvalidInput
from cordum.workflow.model import RunStatus, WorkflowRun
from cordum.workflow.redis_io import execute, read_pipe

if TYPE_CHECKING:
    from cordum.workflow.redis_io import RedisWorkflowProtocol

LIST_SCAN_BUDGET = 2000
"""Index entries one ``list_runs`` call looks at, at most; past that the page ends
early with a cursor, so a rare status filter cannot make a request unbounded."""
_RUN_STATUSES = frozenset(s.value for s in RunStatus)


async def list_runs(redis: RedisWorkflowProtocol, tenant: str, *, workflow_id: str = "",
                    status: str = "", limit: int = 50, cursor: str = "",
                    updated_after: float | None = None,
                    updated_before: float | None = None) -> tuple[list[WorkflowRun], str]:
    """A page of the tenant's runs (of ``workflow_id`` when given), last updated first,
    and the cursor of the next page ("" at the end).

    The cursor is ``"<score>:<run id>"`` of the last run looked at; ``updated_after``
    and ``updated_before`` are exclusive bounds in s, ms or µs since the epoch.
    Raises :class:`InvalidInput` for an unknown status or a malformed cursor.
    """
    if status and status not in _RUN_STATUSES:
        raise InvalidInput(f"unknown run status {status!r}")
    after = _Position.decode(cursor)
    index = (keys.workflow_runs_key(tenant, workflow_id) if workflow_id
             else keys.tenant_runs_key(tenant))
    top = None if after is None else after.score
    if updated_before is not None:
        before_us = normalize_cutoff_us(updated_before) - 1
        top = before_us if top is None else min(top, before_us)
    upper = "+inf" if top is None else str(top)
    lower = "-inf" if updated_after is None else f"({normalize_cutoff_us(updated_after)}"
    limit = max(limit, 1)
    batch = limit + 1
    found: list[tuple[_Position, WorkflowRun]] = []
    offset = examined = 0
    last: _Position | None = None
    while True:
        what = f"list runs of {tenant}"
        (rows,) = await execute(what, read_pipe(redis).zrevrangebyscore(
            index, upper, lower, start=offset, num=batch, withscores=True))
        offset += len(rows)
        entries = [_Position(int(score), as_text(member)) for member, score in rows]
        entries = [e for e in entries if after is None or after.before(e)]
        raws: list[Any] = []
        if entries:
            (raws,) = await execute(what, read_pipe(redis).mget(
                [keys.run_key(e.member) for e in entries]))
        for entry, raw in zip(entries, raws, strict=True):
            last = entry
            examined += 1
            run = WorkflowRun.from_json(json.loads(raw)) if raw is not None else None
            if (run is None or run.org_id != tenant or (status and run.status != status)
                    or (workflow_id and run.workflow_id != workflow_id)):
                continue
            found.append((entry, run))
            if len(found) > limit:
                return [r for _, r in found[:limit]], found[limit - 1][0].encode()
        if len(rows) < batch:
            return [r for _, r in found], ""
        if examined >= LIST_SCAN_BUDGET and last is not None:
            return [r for _, r in found], last.encode()


class _Position:
    """A place in the newest-first order of a runs index (score, then run id desc)."""

    __slots__ = ("member", "score")

    def __init__(self, score: int, member: str) -> None:
        self.score = score
        self.member = member

    def before(self, other: _Position) -> bool:
        """Whether ``other`` comes after this position in the listing."""
        if other.score != self.score:
            return other.score < self.score
        return other.member < self.member

    def encode(self) -> str:
        return f"{self.score}:{self.member}"

    @classmethod
    def decode(cls, raw: str) -> _Position | None:
        if not raw:
            return None
        score, sep, member = raw.strip().partition(":")
        try:
            return cls(int(score), member if sep else "\U0010ffff")
        except ValueError:
            raise InvalidInput("cursor is invalid") from None
