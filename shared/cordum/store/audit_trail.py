"""Governance acts recorded in the tenants' audit chains (:mod:`cordum.store.audit`).

Three ways an act gets its one event, by what the act is:

- **A Redis script** (a job transition, the policy commit): the script appends the
  event itself (:meth:`AuditTrail.script_parts` gives the keys and arguments a script
  built with :func:`~cordum.store.audit.with_audit` passes on), so neither the act nor
  its event exists without the other.
- **A MULTI/EXEC transaction** (a workflow definition written, a DLQ entry deleted):
  :meth:`AuditTrail.stage` queues the event in the tenant's outbox inside the same
  transaction; :meth:`AuditTrail.drain` moves it into the chain right after, and the
  audit tick drains whatever a crash left (:meth:`AuditTrail.drain_all`). The outbox
  is the guarantee: the act's transaction holds its event.
- **No write of its own** (a key that failed to authenticate, a caller rate limited, a
  read of the audit): :meth:`AuditTrail.record` appends directly.

The HMAC key comes from ``CORDUM_AUDIT_HMAC_KEY`` (hex, at least 32 bytes) or the
Secrets Manager secret named by ``CORDUM_AUDIT_HMAC_SECRET_ID`` (its SecretString,
hex); without either the chain has hashes only (docs/audit.md).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from cordum.store.audit import (
    AuditChain,
    AuditEvent,
    Severity,
    audit_keys,
    encode_event,
    event_digest,
    validate_tenant,
    with_audit,
)
from cordum.store.errors import StoreError
from cordum.text import as_text

HMAC_KEY_VAR = "CORDUM_AUDIT_HMAC_KEY"
HMAC_SECRET_VAR = "CORDUM_AUDIT_HMAC_SECRET_ID"
MIN_HMAC_KEY_BYTES = 32

SYSTEM_TENANT = "*"
"""The chain of acts that govern every tenant (the system policy) or no tenant yet
(a key that failed to authenticate)."""
OUTBOX_PREFIX = "audit:outbox:"
OUTBOX_TENANTS = "audit:outbox:tenants"
"""The set of tenants whose outbox holds an event: what the tick drains."""
HOLD_PREFIX = "audit:hold:"
"""``audit:hold:<tenant>`` set: a legal hold; nothing of that tenant's chain is trimmed."""
EXPORTED_PREFIX = "audit:exported:"
"""``audit:exported:<tenant>`` = ``<seq>:<hash>`` of the last entry exported to S3."""
SAMPLE_PREFIX = "audit:sample:"
SAMPLE_WINDOW_S = 60
SAMPLE_MOST = 60
"""Events of one repeatable type a window may add to the chain at most (all buckets)."""
DRAIN_BATCH = 100
"""Events one drain moves at most (one script run)."""
DRAIN_TENANTS = 100
"""Tenants one tick drains at most."""

_LUA = Path(__file__).parent / "lua"


class AuditKeyError(ValueError):
    """The configured HMAC key is not usable (not hex, or too short)."""


def hmac_key_from(env: Mapping[str, str], secrets: Any = None) -> bytes | None:
    """The HMAC key the environment names; None when it names none."""
    raw = (env.get(HMAC_KEY_VAR) or "").strip()
    var = HMAC_KEY_VAR
    if not raw and (secret_id := (env.get(HMAC_SECRET_VAR) or "").strip()):
        from cordum import aws

        client = secrets if secrets is not None else aws.client("secretsmanager", env)
        raw = str(client.get_secret_value(SecretId=secret_id).get("SecretString") or "").strip()
        var = HMAC_SECRET_VAR
    if not raw:
        return None
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        raise AuditKeyError(f"{var}: the audit HMAC key must be hex") from None
    if len(key) < MIN_HMAC_KEY_BYTES:
        raise AuditKeyError(f"{var}: the audit HMAC key must be at least "
                            f"{MIN_HMAC_KEY_BYTES} bytes ({2 * MIN_HMAC_KEY_BYTES} hex)")
    return key


@lru_cache(maxsize=1)
def process_hmac_key() -> bytes | None:
    """This process's HMAC key (read once: a secret is fetched at most once per container)."""
    return hmac_key_from(os.environ)


def outbox_key(tenant: str) -> str:
    return OUTBOX_PREFIX + validate_tenant(tenant)


def hold_key(tenant: str) -> str:
    return HOLD_PREFIX + validate_tenant(tenant)


def exported_key(tenant: str) -> str:
    return EXPORTED_PREFIX + validate_tenant(tenant)


def now_us() -> int:
    return time.time_ns() // 1000


GOVERNANCE: dict[str, Severity] = {
    "job.submit.denied": Severity.HIGH,
    "job.submit.throttled": Severity.MEDIUM,
    "job.submit.gated": Severity.MEDIUM,
    "approval.approve": Severity.MEDIUM,
    "approval.reject": Severity.MEDIUM,
    "job.cancel": Severity.LOW,
    "job.remediate": Severity.LOW,
    "dlq.retry": Severity.LOW,
    "dlq.delete": Severity.MEDIUM,
    "workflow.create": Severity.LOW,
    "workflow.update": Severity.MEDIUM,
    "workflow.delete": Severity.MEDIUM,
    "run.start": Severity.INFO,
    "run.rerun": Severity.LOW,
    "run.cancel": Severity.LOW,
    "policy.edit": Severity.HIGH,
    "policy.delete": Severity.HIGH,
    "policy.snapshot": Severity.LOW,
    "policy.publish": Severity.HIGH,
    "policy.rollback": Severity.HIGH,
    "policy.propose": Severity.MEDIUM,
    "policy.reject_proposal": Severity.MEDIUM,
    "config.set": Severity.HIGH,
    "schema.register": Severity.MEDIUM,
    "schema.delete": Severity.MEDIUM,
    "topic.create": Severity.MEDIUM,
    "topic.update": Severity.MEDIUM,
    "topic.delete": Severity.MEDIUM,
    "auth.failed": Severity.MEDIUM,
    "auth.rate_limited": Severity.LOW,
    "output.quarantine": Severity.HIGH,
    "output.redact": Severity.MEDIUM,
    "audit.read": Severity.INFO,
    "audit.verify": Severity.INFO,
    "audit.hold": Severity.HIGH,
}
"""Every governance act's event type and its severity (docs/audit.md, "What is recorded")."""


def governance(type_: str, tenant: str, actor: str, actor_key: str = "",
               **fields: Any) -> AuditEvent:
    """The event of the governance act ``type_`` (one of :data:`GOVERNANCE`) happening now."""
    return act(type_, GOVERNANCE[type_], tenant, actor, actor_key, **fields)


def act(type_: str, severity: Severity | str, tenant: str, actor: str, actor_key: str = "",
        **fields: Any) -> AuditEvent:
    """An event of an act happening now."""
    return AuditEvent(type=type_, severity=severity, tenant=tenant, actor=actor,
                      actor_key=actor_key, at=now_us(), **fields)


class AuditTrail:
    """Records acts in the chains of ``redis`` (signed with ``hmac_key`` when given)."""

    def __init__(self, redis: Any, hmac_key: bytes | None = None) -> None:
        self._redis = redis
        self.chain = AuditChain(redis, hmac_key)
        self._drain = redis.register_script(with_audit((_LUA / "audit_drain.lua").read_text()))
        self._sampled = redis.register_script(
            with_audit((_LUA / "audit_sampled.lua").read_text()))

    # -- an act that is a script ----------------------------------------------------

    def script_parts(self, event: AuditEvent) -> tuple[list[str], list[bytes]]:
        """The chain's keys ([stream, head]) and arguments ([event, its SHA-256 hex, HMAC
        key]) a script passes to ``audit_append``."""
        return audit_keys(event.tenant), self.chain.script_args(event)

    # -- an act that is a transaction -----------------------------------------------

    @staticmethod
    def stage(pipe: Any, event: AuditEvent) -> None:
        """Queue ``event`` in its tenant's outbox within the transaction ``pipe``, as
        ``<sha256 hex>\\n<event bytes>``: the digest is computed here, so the drain's
        script hashes no event."""
        data = encode_event(event)
        pipe.rpush(outbox_key(event.tenant), event_digest(data).encode("ascii") + b"\n" + data)
        pipe.sadd(OUTBOX_TENANTS, event.tenant)

    async def drain(self, tenant: str, most: int = DRAIN_BATCH) -> int:
        """Move up to ``most`` staged events of ``tenant`` into its chain; how many."""
        keys = [outbox_key(tenant), *audit_keys(tenant), OUTBOX_TENANTS]
        try:
            return int(await self._drain(keys=keys, args=[
                self.chain.hmac_key or b"", str(most), tenant]))
        except Exception as exc:
            raise StoreError(f"audit drain of {tenant!r}: {exc}") from exc

    async def drain_quietly(self, tenant: str) -> None:
        """:meth:`drain` after an act whose transaction staged an event: a failure is
        left to the tick (the event waits in the outbox), never the act's caller's."""
        import logging

        try:
            await self.drain(tenant)
        except StoreError as exc:
            logging.getLogger(__name__).warning("audit: %s; the tick drains it", exc)

    async def drain_all(self, most_tenants: int = DRAIN_TENANTS) -> int:
        """One tick: drain the outbox of up to ``most_tenants`` tenants; events moved."""
        try:
            members = await self._redis.srandmember(OUTBOX_TENANTS, most_tenants)
        except Exception as exc:
            raise StoreError(f"audit outbox tenants: {exc}") from exc
        moved = 0
        for tenant in sorted(as_text(m) for m in members or []):
            moved += await self.drain(tenant)
        return moved

    # -- an act with no write of its own ----------------------------------------------

    async def record(self, event: AuditEvent) -> tuple[int, str]:
        """Append ``event`` now, in one round trip; (seq, hash)."""
        return await self.chain.append(event.tenant, event)

    async def record_sampled(self, event: AuditEvent, bucket: str, *,
                             window_s: int = SAMPLE_WINDOW_S,
                             most: int = SAMPLE_MOST) -> int:
        """Append ``event`` unless one of the same type and ``bucket`` was appended in
        this window of ``window_s``, or ``most`` of its type were to the same chain (in
        all buckets): the bound on what a repeatable act (a failed authentication, a
        caller rate limited) can cost a chain. The count is the chain's own, so one
        tenant's flood never leaves another tenant's acts out. The entry's seq, or 0
        when left out. One round trip."""
        window = now_us() // (window_s * 1_000_000)
        digest = hashlib.sha256(bucket.encode()).hexdigest()[:32]
        chain = hashlib.sha256(event.tenant.encode()).hexdigest()[:16]
        keys = [f"{SAMPLE_PREFIX}{event.type}:{digest}:{window}",
                f"{SAMPLE_PREFIX}{event.type}:{chain}:count:{window}", *audit_keys(event.tenant)]
        args = self.chain.script_args(event)
        try:
            return int(await self._sampled(keys=keys, args=[window_s, most, len(args), *args]))
        except Exception as exc:
            raise StoreError(f"audit sampled append to {event.tenant!r}: {exc}") from exc
