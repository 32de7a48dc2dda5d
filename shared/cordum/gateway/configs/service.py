"""Reading and writing config documents, the effective config, and the change news.

**A write** merges the body's ``data`` members into the document (each replaces the
member of its name, as Cordum's write does; ``meta`` likewise), then commits it with
the revision it read (:meth:`cordum.store.config_docs.ConfigDocs.commit`): one GET,
then one script that writes the document and its ``config.set`` event in the audit
chain (the tenant's, or ``*`` for a system document) together, or nothing. When the
body names a ``revision`` the write is refused with 409 ``config_version_conflict``
unless the document is at that revision; without one a write that lost a race is
worked out again on the newer document, at most :data:`MAX_ATTEMPTS` times (then
409), as Cordum's retrying write does. So a write costs at most 2 × 3 round trips.

After a write ``sys.config.changed`` is published with ``{scope, scope_id, tenant,
revision, changed_at}``; a publish that fails is logged, never the write's failure
(readers of the config re-read it anyway).

**The effective config** is one MGET of the (at most five) documents that apply,
merged (:func:`cordum.store.config_docs.snapshot`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.configs.models import POLICY_KEY, merged_meta
from cordum.gateway.core.errors import Conflict, InvalidRequest, NotFound
from cordum.gateway.core.times import rfc3339_s
from cordum.safety.bundles import CONFIG_CHANGED_SUBJECT
from cordum.store.audit_trail import governance
from cordum.store.config_docs import (
    MAX_DATA_BYTES,
    SYSTEM,
    SYSTEM_DEFAULT_ID,
    canonical,
    data_hash,
    revision_of,
    scope_keys,
    snapshot,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.gateway.configs.access import Target
    from cordum.gateway.configs.models import Write
    from cordum.gateway.core.auth import Principal
    from cordum.store.audit_trail import AuditTrail
    from cordum.store.config_docs import ConfigDocs

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Tries of a write without ``revision`` that keeps losing races (Cordum's number)."""
AUDIT_KEYS_SHOWN = 32
"""Names of the members a write set that its audit event lists, at most."""
AUDIT_KEY_CHARS = 64
EVENT_TYPE = "config.set"


class ConfigNews(Protocol):
    """Where ``sys.config.changed`` goes (``cordum.bus.publisher.NatsPublisher``)."""

    async def publish_bytes(self, subject: str, data: bytes) -> None: ...


def conflict(message: str = "config update conflict: read the document again and retry"
             ) -> Conflict:
    return Conflict(message, "config_version_conflict")


class ConfigService:
    def __init__(self, docs: ConfigDocs, news: ConfigNews, audit: AuditTrail,
                 clock: Callable[[], float] = time.time) -> None:
        self._docs = docs
        self._news = news
        self._audit = audit
        self._clock = clock

    # -- reads ----------------------------------------------------------------------

    async def document(self, place: Target) -> dict[str, Any] | None:
        """The document at ``place`` (None: there is none)."""
        return await self._docs.get(place.key)

    async def effective(self, tenant: str, team_id: str, workflow_id: str,
                        step_id: str) -> dict[str, Any]:
        keys = scope_keys(tenant, team_id, workflow_id, step_id)
        return snapshot(await self._docs.read_many(keys))

    # -- writes -----------------------------------------------------------------------

    async def write(self, who: Principal, place: Target, change: Write) -> int:
        """Apply ``change`` to the document at ``place``; the new revision."""
        if place.scope == SYSTEM and place.scope_id == SYSTEM_DEFAULT_ID and \
                POLICY_KEY in change.data:
            raise InvalidRequest("bundles must be written to the policy's routes, not "
                                 "system/default", "config_key_forbidden")
        for _ in range(MAX_ATTEMPTS):
            before = await self._docs.get(place.key)
            read = revision_of(before)
            if change.revision is not None and change.revision != read:
                raise conflict(f"config is at revision {read}, not {change.revision}: read "
                               "it again and retry")
            document, old_hash = self._applied(place, before, change, read + 1)
            event = self._event(who, place, change, read + 1, old_hash, document)
            outcome = await self._docs.commit(place.key, place.chain_tenant, read, document,
                                              self._audit.script_parts(event))
            if outcome == 1:
                await self._announce(place, read + 1)
                return read + 1
            if outcome < 0:
                raise Conflict("the tenant holds the most config documents it may",
                               "config_document_limit")
            if change.revision is not None:
                raise conflict()
        raise conflict()

    def _applied(self, place: Target, before: dict[str, Any] | None, change: Write,
                 revision: int) -> tuple[dict[str, Any], str]:
        """The document after ``change`` and the hash of its data before; 400 when the
        data would be larger than the bound."""
        old = (before or {}).get("data")
        data = dict(old) if isinstance(old, dict) else {}
        old_hash = data_hash(data) if before is not None else ""
        data.update(change.data)  # each member replaces its namesake (Cordum's write)
        size = len(canonical(data).encode())
        if size > MAX_DATA_BYTES:
            raise InvalidRequest(f"the document's data would be {size} bytes of JSON, more "
                                 f"than {MAX_DATA_BYTES}", "config_too_large")
        document: dict[str, Any] = {
            "scope": place.scope, "scope_id": place.scope_id, "data": data,
            "revision": revision, "updated_at": rfc3339_s(self._clock())}
        meta = merged_meta((before or {}).get("meta"), change.meta)
        if meta:
            document["meta"] = meta
        return document, old_hash

    def _event(self, who: Principal, place: Target, change: Write, revision: int,
               old_hash: str, document: dict[str, Any]) -> Any:
        names = sorted(change.data)
        return governance(
            EVENT_TYPE, place.chain_tenant, who.principal_id, who.key_id,
            snapshot={"before": old_hash, "after": data_hash(document["data"])},
            extra={"scope": place.scope, "scope_id": place.scope_id, "revision": revision,
                   "acting_tenant": who.tenant, "keys_total": len(names),
                   "keys": [n[:AUDIT_KEY_CHARS] for n in names[:AUDIT_KEYS_SHOWN]]})

    async def _announce(self, place: Target, revision: int) -> None:
        news = json.dumps({"scope": place.scope, "scope_id": place.scope_id,
                           "tenant": place.chain_tenant, "revision": revision,
                           "changed_at": rfc3339_s(self._clock())},
                          separators=(",", ":")).encode()
        try:
            await self._news.publish_bytes(CONFIG_CHANGED_SUBJECT, news)
        except Exception as exc:  # the write stands; readers re-read the config anyway
            log.warning("config %s/%s revision %d written; %s not published: %s",
                        place.scope, place.scope_id, revision, CONFIG_CHANGED_SUBJECT, exc)


def not_found() -> NotFound:
    return NotFound("config not found", "config_not_found")
