"""Which runs a workflow tick serves: each tenant a bounded share, in turn.

Neither the timer set nor the open-run set names a run's tenant (their members are
``<workflow_id>:<run_id>`` and run ids), so the tenant is read from the head of the
run's JSON: ``WorkflowRun.to_json`` writes ``id``, ``workflow_id`` and ``org_id``
first, and ``RUN_HEAD_BYTES`` of it hold them (a uuid, an id of at most 64 characters,
the tenant). One GETRANGE per run, pipelined, and only for runs this process has not
met yet (a run's tenant never changes); a head that does not read so is read whole.
A run whose tenant cannot be read at all shares the share of tenant "".

``fair_pick`` takes from a page the runs of each tenant in turn (the first of each
tenant, then the second, ...), at most ``per_tenant`` of one tenant and ``limit`` in
all: one tenant's thousands of runs ahead in the page do not keep another's from the
tick, and a tick cut short by its deadline has served every tenant in the page.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from cordum.store.json_docs import json_object
from cordum.workflow import keys
from cordum.workflow.redis_io import execute

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from cordum.workflow.redis_io import RedisWorkflowProtocol

RUN_HEAD_BYTES = 512
"""Bytes of a run's JSON read to learn its tenant and workflow."""
REMEMBERED_OWNERS = 20_000
"""Runs whose tenant and workflow a process remembers (about 2 MB)."""
_STRING = r'"((?:[^"\\]|\\.)*)"'
_HEAD = re.compile(r'\{"id":' + _STRING + r',"workflow_id":' + _STRING + r',"org_id":' + _STRING)

_known: OrderedDict[str, tuple[str, str]] = OrderedDict()
"""run id -> (tenant, workflow id), shared by the process's ticks (warm invocations)."""


def owner_of_head(head: str) -> tuple[str, str] | None:
    """(tenant, workflow id) from the start of a run's JSON; None when it does not read."""
    found = _HEAD.match(head)
    if found is None:
        return None
    try:
        return json.loads(f'"{found.group(3)}"'), json.loads(f'"{found.group(2)}"')
    except ValueError:
        return None


async def owners_of(redis: RedisWorkflowProtocol, run_ids: Iterable[str]
                    ) -> dict[str, tuple[str, str]]:
    """(tenant, workflow id) of each run (("", "") for one that is gone or unreadable)."""
    out: dict[str, tuple[str, str]] = {}
    unknown: list[str] = []
    for run_id in dict.fromkeys(run_ids):
        if run_id in _known:
            out[run_id] = _known[run_id]
        else:
            unknown.append(run_id)
    if not unknown:
        return out
    pipe = redis.pipeline(transaction=False)
    for run_id in unknown:
        pipe.getrange(keys.run_key(run_id), 0, RUN_HEAD_BYTES - 1)
    heads = await execute("run owners", pipe)
    whole: list[str] = []
    for run_id, head in zip(unknown, heads, strict=True):
        # The cut at RUN_HEAD_BYTES may split a character of what follows the tenant.
        found = owner_of_head(head.decode("utf-8", "replace") if isinstance(head, bytes)
                              else str(head or ""))
        if found is not None:
            out[run_id] = _remember(run_id, found)
            continue
        out[run_id] = ("", "")
        if head:
            whole.append(run_id)
    if whole:  # written with its fields in another order, or a very long tenant
        pipe = redis.pipeline(transaction=False)
        for run_id in whole:
            pipe.get(keys.run_key(run_id))
        for run_id, raw in zip(whole, await execute("run owners", pipe), strict=True):
            doc = json_object(raw)
            if doc is not None:
                out[run_id] = _remember(run_id, (str(doc.get("org_id") or ""),
                                                 str(doc.get("workflow_id") or "")))
    return out


def fair_pick(ids: Iterable[str], tenant_of: Callable[[str], str], *, limit: int,
              per_tenant: int) -> list[str]:
    """The ids to serve, tenants in turn: at most ``per_tenant`` of one tenant's and
    ``limit`` in all, each tenant's in the order given."""
    queues: dict[str, list[str]] = {}
    for run_id in ids:
        queue = queues.setdefault(tenant_of(run_id), [])
        if len(queue) < per_tenant:
            queue.append(run_id)
    picked: list[str] = []
    for turn in range(per_tenant):
        for queue in queues.values():
            if turn < len(queue):
                picked.append(queue[turn])
                if len(picked) >= limit:
                    return picked
    return picked


async def look_later(redis: RedisWorkflowProtocol, run_ids: list[str]) -> None:
    """Move open runs to the back of the open-run list, in the order given. Only runs
    still open move (XX), and never ahead of where a save just put them (GT)."""
    if not run_ids:
        return
    base = time.time_ns() // 1000
    await execute("open runs", redis.pipeline(transaction=False).zadd(
        keys.OPEN_RUNS_KEY, {r: base + i for i, r in enumerate(run_ids)}, xx=True, gt=True))


def _remember(run_id: str, owner: tuple[str, str]) -> tuple[str, str]:
    _known[run_id] = owner
    while len(_known) > REMEMBERED_OWNERS:
        _known.popitem(last=False)
    return owner
