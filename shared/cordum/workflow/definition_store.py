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

from cordum.store.audit import with_audit
from cordum.store.audit_trail import AuditTrail
from cordum.text import as_text
from cordum.workflow import keys
from cordum.workflow.definition import Workflow
from cordum.workflow.errors import WorkflowError
from cordum.workflow.redis_io import dumps, execute, read_pipe, redis_errors, time_us

if TYPE_CHECKING:
    from cordum.store.audit import AuditEvent
    from cordum.store.jobs import AuditParts
    from cordum.workflow.redis_io import RedisWorkflowProtocol

log = logging.getLogger(__name__)


DELETE_LUA = """
-- Delete a workflow definition and its index member, and append the act's audit
-- event, in one step (run after audit_chain.lua: store.audit.with_audit).
-- KEYS[1] the definition  KEYS[2] the tenant's definition index
-- KEYS[3], KEYS[4] the tenant's audit stream and head (when ARGV[2] > 0)
-- ARGV[1] the workflow id  ARGV[2] M, the number of audit arguments (0: none)
-- ARGV[3..2+M] what audit_append takes after the keys
-- Returns 1 when deleted, 0 when there was no such definition (nothing is written).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local audited = tonumber(ARGV[2])
if audited > 0 then audit_append(KEYS[3], KEYS[4], unpack(ARGV, 3, 2 + audited)) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""


class DefinitionStore:
    def __init__(self, redis: RedisWorkflowProtocol) -> None:
        self._redis = redis
        self._delete = redis.register_script(with_audit(DELETE_LUA))

    async def put_definition(self, wf: Workflow, *, audit: AuditEvent | None = None) -> None:
        """Write ``wf``; with ``audit``, the act's event staged in its tenant's outbox by
        the same transaction (the caller drains it: ``AuditTrail.drain``)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(keys.definition_key(wf.org_id, wf.id), dumps(wf.to_json()))
        pipe.zadd(keys.definition_index_key(wf.org_id), {wf.id: time_us(wf.updated_at)})
        if audit is not None:
            AuditTrail.stage(pipe, audit)
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

    async def delete_definition(self, tenant: str, workflow_id: str, *,
                                audit: AuditParts | None = None) -> bool:
        """Runs of the definition stay: each keeps the definition it started with.
        ``audit``: the act's event, appended by the same script when it deletes."""
        audit_keys, audit_args = audit or ([], [])
        with redis_errors(f"delete workflow {workflow_id}"):
            deleted = await self._delete(
                keys=[keys.definition_key(tenant, workflow_id),
                      keys.definition_index_key(tenant), *audit_keys],
                args=[workflow_id, len(audit_args), *audit_args])
        return bool(int(deleted))


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
