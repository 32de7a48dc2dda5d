"""API keys: X-API-Key or ``Authorization: Bearer <key>``, each bound to a tenant and role.

Keys come from CORDUM_API_KEYS (a JSON array of ``{"key", "tenant", "role",
"principal_id"}`` or a comma-separated list of plain keys, which are not bound
to a tenant), CORDUM_API_KEY, or
the file named by CORDUM_API_KEYS_PATH. They are compared in constant time
and never logged.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum.gateway.errors import ApiError, unauthorized

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_TENANT = "default"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ApiKey:
    key: str
    tenant: str = ""
    """The tenant the key is bound to; "" lets the key act for any tenant."""
    role: str = "admin"
    principal_id: str = ""


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    role: str
    principal_id: str


class KeyConfigError(ValueError):
    pass


def parse_keys(raw: str) -> list[ApiKey]:
    raw = raw.strip()
    if not raw:
        return []
    if raw.startswith("["):
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise KeyConfigError(f"CORDUM_API_KEYS is not valid JSON: {exc.msg}") from None
        keys = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not str(entry.get("key") or "").strip():
                raise KeyConfigError(f"CORDUM_API_KEYS entry {i} has no key")
            keys.append(
                ApiKey(
                    key=str(entry["key"]).strip(),
                    tenant=str(entry.get("tenant") or ""),
                    role=str(entry.get("role") or "admin"),
                    principal_id=str(entry.get("principal_id") or ""),
                )
            )
        return keys
    return [ApiKey(key=k.strip()) for k in raw.split(",") if k.strip()]


def load_keys(env: Mapping[str, str] | None = None) -> list[ApiKey]:
    env = os.environ if env is None else env
    keys = parse_keys(env.get("CORDUM_API_KEYS", ""))
    if env.get("CORDUM_API_KEY"):
        keys.append(ApiKey(key=env["CORDUM_API_KEY"].strip()))
    path = env.get("CORDUM_API_KEYS_PATH")
    if path:
        with open(path, encoding="utf-8") as fh:
            keys += parse_keys(fh.read())
    return keys


class Authenticator:
    def __init__(self, keys: list[ApiKey]) -> None:
        self._keys = keys
        if not keys:
            log.error("no API keys configured (CORDUM_API_KEYS): every request is refused")

    def _match(self, presented: str) -> ApiKey | None:
        found = None
        for entry in self._keys:
            # Check every key, so the time taken does not tell which one was close.
            if hmac.compare_digest(entry.key.encode(), presented.encode()):
                found = entry
        return found

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """``headers`` with lower-case names."""
        presented = headers.get("x-api-key", "")
        if not presented:
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                presented = auth[7:].strip()
        if not presented:
            raise unauthorized()
        key = self._match(presented)
        if key is None:
            raise unauthorized()
        tenant = headers.get("x-tenant-id", "").strip() or key.tenant or DEFAULT_TENANT
        if key.tenant and tenant != key.tenant:
            raise ApiError(403, "tenant access denied")
        return Principal(tenant=tenant, role=key.role, principal_id=key.principal_id)
