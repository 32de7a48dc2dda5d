"""Workflow definitions on Redis (keys in :mod:`cordum.workflow.keys`), by tenant.

A definition's key names its tenant, so another tenant's definition reads as one
that does not exist. Runs keep a snapshot of the definition they started with
(:mod:`cordum.workflow.store`); :func:`stored_definition` parses both.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from cordum.text import as_text
from cordum.workflow import keys
from cordum.workflow.definition import Workflow
from cordum.workflow.errors import WorkflowError
from cordum.workflow.redis_io import dumps, execute, read_pipe, time_us

if TYPE_CHECKING:
    from cordum.workflow.redis_io import RedisWorkflowProtocol

log = logging.getLogger(__name__)


class DefinitionStore:
    def __init__(self, redis: RedisWorkflowProtocol) -> None:
        self._redis = redis

    async def put_definition(self, wf: Workflow) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(keys.definition_key(wf.org_id, wf.id), dumps(wf.to_json()))
        pipe.zadd(keys.definition_index_key(wf.org_id), {wf.id: time_us(wf.updated_at)})
        await execute(f"put workflow {wf.id}", pipe)

    async def get_definition(self, tenant: str, workflow_id: str) -> Workflow | None:
        (raw,) = await execute(f"get workflow {workflow_id}",
                               read_pipe(self._redis).get(keys.definition_key(tenant, workflow_id)))
        return stored_definition(raw, workflow_id)

    async def list_definitions(self, tenant: str, limit: int = 100) -> list[Workflow]:
        """The tenant's definitions, last updated first."""
        what = f"list workflows of {tenant}"
        (ids,) = await execute(what, read_pipe(self._redis).zrevrange(
            keys.definition_index_key(tenant), 0, max(limit, 1) - 1))
        ids = [as_text(i) for i in ids]
        if not ids:
            return []
        (raws,) = await execute(what, read_pipe(self._redis).mget(
            [keys.definition_key(tenant, i) for i in ids]))
        found = [stored_definition(raw, i) for i, raw in zip(ids, raws, strict=True)]
        return [wf for wf in found if wf is not None]

    async def delete_definition(self, tenant: str, workflow_id: str) -> bool:
        """Runs of the definition stay: each keeps the definition it started with."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(keys.definition_key(tenant, workflow_id))
        pipe.zrem(keys.definition_index_key(tenant), workflow_id)
        deleted, _ = await execute(f"delete workflow {workflow_id}", pipe)
        return bool(deleted)


def stored_definition(raw: Any, workflow_id: str) -> Workflow | None:
    """A stored definition (or a run's snapshot of one); None when absent or unreadable."""
    if raw is None:
        return None
    try:
        return _parsed_definition(raw if isinstance(raw, bytes) else str(raw).encode())
    except (ValidationError, ValueError, WorkflowError) as exc:
        log.error("stored workflow %s does not parse: %s", workflow_id, exc)
        return None


@lru_cache(maxsize=64)
def _parsed_definition(raw: bytes) -> Workflow:
    """A run's definition snapshot never changes: each is parsed once per process (the
    engine reads a definition, it never changes one)."""
    return Workflow.model_validate_json(raw)
