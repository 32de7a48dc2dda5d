"""Who opens a stream: the API key, the tenant it streams, and whether it still may.

The one module of the stream that imports the gateway (its key sources and tenant
rules, ``cordum.gateway.core.auth``), so a move of that module is fixed here alone.

A credential is looked for in this order: ``X-API-Key``, ``Authorization: Bearer``,
then the WebSocket subprotocol (a browser cannot set headers on a WebSocket):
``Sec-WebSocket-Protocol: cordum-api-key, <token>`` or ``cordum-api-key.<token>``, the
identifier in any case. The token is tried decoded as unpadded base64url, then as
standard base64, then as it is; the first that names a key wins (a raw key that
happens to be valid base64 still works).

The tenant: ``X-Tenant-ID``, else ``X-Cordum-Tenant`` (cordum-sdk's stream sends only
that one), else ``?tenant_id=``, else ``?tenant=``, else the key's own. A key acts for
its own tenant only, as in the gateway; a ``"*"`` key acts for the tenant it names,
and one that names none (or names ``*``) streams every tenant.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cordum.gateway.core.auth import (
    ANY_TENANT,
    CORDUM_TENANT_HEADER,
    TENANT_HEADER,
    ApiKey,
    KeyLoader,
    KeyRefreshPolicy,
    KeyRing,
    bound_tenant,
    key_id,
    resolve_tenant,
)
from cordum.gateway.core.errors import KeysUnavailable
from cordum.stream.errors import Forbidden, Unauthorized, Unavailable

if TYPE_CHECKING:
    from collections.abc import Mapping

log = logging.getLogger(__name__)

SUBPROTOCOL = "cordum-api-key"
"""The subprotocol that carries a key; the server answers it, never the token."""
ADMIN_ROLE = "admin"
"""The role that also receives heartbeats and alerts of no tenant."""
TENANT_QUERY_NAMES = ("tenant_id", "tenant")
MAX_TOKEN_CHARS = 4096
"""A subprotocol token longer than this is no key of ours (and is not decoded)."""

__all__ = ["ANY_TENANT", "ADMIN_ROLE", "SUBPROTOCOL", "ApiKey", "Caller", "KeyLoader",
           "KeyRefreshPolicy", "KeyRing", "StreamAuth", "offered_subprotocol"]


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated stream client."""

    tenant: str | None
    """The tenant streamed; None: every tenant (a ``"*"`` key that named none)."""
    role: str
    principal_id: str
    key_id: str
    """:func:`cordum.gateway.core.auth.key_id` of the key: logs and the per-key limit."""
    bound: str = field(repr=False)
    """The tenant the key is bound to (``"*"`` for any), as it was when authenticated."""
    digest: bytes = field(repr=False)
    """SHA-256 of the key: what the recheck compares, so no key is kept in memory."""

    @property
    def admin(self) -> bool:
        return self.role == ADMIN_ROLE

    def sees(self, tenant: str | None) -> bool:
        """Whether an event of ``tenant`` (None: of no tenant) is this caller's."""
        if tenant is None:
            return self.admin
        return self.tenant is None or self.tenant == tenant


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _entries(value: str) -> list[str]:
    return [part.strip().strip('"').strip() for part in value.split(",") if part.strip()]


def offered_subprotocol(headers: Mapping[str, str]) -> str | None:
    """The identifier entry as the client spelled it, when it offered the bare one:
    what the server answers (a browser refuses a handshake that answers anything it
    did not offer). None when only the dot form, or nothing of ours, was offered."""
    for entry in _entries(_lower(headers).get("sec-websocket-protocol", "")):
        if entry.lower() == SUBPROTOCOL:
            return entry
    return None


def subprotocol_token(headers: Mapping[str, str]) -> str:
    """The token the subprotocol header carries, '' when none."""
    entries = _entries(_lower(headers).get("sec-websocket-protocol", ""))
    for i, entry in enumerate(entries):
        if entry.lower() == SUBPROTOCOL and i + 1 < len(entries):
            return entries[i + 1]
        if entry.lower().startswith(SUBPROTOCOL + "."):
            return entry[len(SUBPROTOCOL) + 1:]
    return ""


def token_candidates(token: str) -> list[str]:
    """The keys a subprotocol token may stand for, in the order they are tried."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return []
    out: list[str] = []
    padded = token + "=" * (-len(token) % 4)
    for decode in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            text = decode(padded.encode("ascii")).decode("utf-8").strip()
        except (binascii.Error, ValueError, UnicodeError):
            continue
        if text and text.isprintable() and text not in out:
            out.append(text)
    if token not in out:
        out.append(token)
    return out


def presented_keys(headers: Mapping[str, str]) -> list[str]:
    """What the request presents as its key, in the order it is tried."""
    lowered = _lower(headers)
    key = lowered.get("x-api-key", "").strip()
    if key:
        return [key]
    auth = lowered.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return [auth[7:].strip()]
    return token_candidates(subprotocol_token(lowered))


def requested_tenant(headers: Mapping[str, str], query: Mapping[str, str]) -> str:
    lowered = _lower(headers)
    for value in (lowered.get(TENANT_HEADER, ""), lowered.get(CORDUM_TENANT_HEADER, ""),
                  *(query.get(name, "") for name in TENANT_QUERY_NAMES)):
        if value.strip():
            return value.strip()
    return ""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class StreamAuth:
    """Authenticates stream requests against the gateway's key sources.

    The key ring may read SSM or Secrets Manager (boto3, blocking): every read runs
    in a worker thread, off the event loop that serves the streams.
    """

    def __init__(self, ring: KeyRing) -> None:
        self._ring = ring

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StreamAuth:
        """The gateway's sources (CORDUM_API_KEYS, ..._PATH, SSM, Secrets Manager),
        read again every CORDUM_API_KEYS_TTL_S."""
        return cls(KeyRing(KeyLoader(env), KeyRefreshPolicy.from_env(env)))

    @classmethod
    def fixed(cls, keys: list[ApiKey]) -> StreamAuth:
        return cls(KeyRing.fixed(keys))

    async def _keys(self) -> list[ApiKey]:
        try:
            return await asyncio.to_thread(self._ring.keys)
        except KeysUnavailable:
            raise Unavailable("api-keys") from None

    async def authenticate(self, headers: Mapping[str, str],
                           query: Mapping[str, str]) -> Caller:
        candidates = presented_keys(headers)
        if not candidates:
            raise Unauthorized
        keys = await self._keys()
        match: tuple[ApiKey, str] | None = None
        for presented in candidates:
            for entry in keys:
                # Every key is compared, so the time taken does not tell which was close.
                if hmac.compare_digest(entry.key.encode(), presented.encode()) and match is None:
                    match = (entry, presented)
        if match is None:
            raise Unauthorized
        key, presented = match
        bound = bound_tenant(key)
        named = requested_tenant(headers, query)
        if bound == ANY_TENANT and named in ("", ANY_TENANT):
            tenant: str | None = None
        else:
            tenant = resolve_tenant({TENANT_HEADER: named} if named else {}, key)
            if tenant == ANY_TENANT or (bound != ANY_TENANT and tenant != bound):
                raise Forbidden
        return Caller(tenant=tenant, role=key.role, principal_id=key.identity,
                      key_id=key_id(presented), bound=bound, digest=_digest(presented))

    async def still_valid(self, caller: Caller) -> bool:
        """Whether the caller's key is still configured, for the same tenant and role.

        A key source that cannot be read now keeps the stream (the ring keeps the keys
        read before): only a successful read that lacks the key cuts it off.
        """
        try:
            keys = await self._keys()
        except Exception as exc:
            log.warning("key recheck skipped: %s", type(exc).__name__)
            return True
        found = False
        for entry in keys:
            same = hmac.compare_digest(_digest(entry.key), caller.digest)
            found = found or (same and bound_tenant(entry) == caller.bound
                              and entry.role == caller.role)
        return found
