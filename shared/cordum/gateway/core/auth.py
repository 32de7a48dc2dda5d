"""API keys: X-API-Key or ``Authorization: Bearer <key>``, each bound to a tenant and role.

Keys come from CORDUM_API_KEYS (a JSON array of ``{"key", "tenant", "role",
"principal_id"}`` or a comma-separated list of plain keys), CORDUM_API_KEY, the
file named by CORDUM_API_KEYS_PATH, the SSM SecureString parameter named by
CORDUM_API_KEYS_SSM_PARAMETER and the Secrets Manager secret named by
CORDUM_API_KEYS_SECRET_ID (its name or ARN; CORDUM_API_KEYS_SECRET_ARN, the older
name, still works), all holding the same JSON; keys from every configured source
are accepted. The AWS stack uses the secret: GetSecretValue takes 10,000 calls a
second per account, where SSM's standard throughput takes 40, which a cold start
of many gateway containers at once would exceed.

A key grants only what its entry says. Without ``role`` it is a ``user``;
without ``tenant`` it is bound to tenant ``default``, and only ``"tenant": "*"``
lets it act for any tenant. Plain keys (a comma-separated list, CORDUM_API_KEY)
are users of tenant ``default``. The caller's identity (``Principal.principal_id``:
who submitted a job, who approved it) is the entry's ``principal_id``, else
``key:<key id>``; nothing in a request body can change it.

A :class:`KeyRing` keeps the loaded keys for the container and reads them again
after CORDUM_API_KEYS_TTL_S, so a rotated key takes effect without a redeploy.
Keys are compared in constant time and never logged; logs and the Principal
name a key by :func:`key_id`, a digest prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cordum import aws
from cordum.gateway.core.errors import Forbidden, KeysUnavailable, Unauthorized

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_TENANT = "default"
ANY_TENANT = "*"
"""The tenant of a key that may act for every tenant (named explicitly, never a default)."""
DEFAULT_ROLE = "user"
"""The role of a key entry that names none: the least a key that submits jobs needs."""

KEYS_VAR = "CORDUM_API_KEYS"
KEY_VAR = "CORDUM_API_KEY"
KEYS_PATH_VAR = "CORDUM_API_KEYS_PATH"
KEYS_SSM_VAR = "CORDUM_API_KEYS_SSM_PARAMETER"
KEYS_SECRET_VAR = "CORDUM_API_KEYS_SECRET_ARN"
KEYS_SECRET_ID_VAR = "CORDUM_API_KEYS_SECRET_ID"
"""The secret's name or ARN (GetSecretValue's SecretId takes either)."""
KEYS_TTL_VAR = "CORDUM_API_KEYS_TTL_S"

TENANT_HEADER = "x-tenant-id"
CORDUM_TENANT_HEADER = "x-cordum-tenant"
"""Sent by cordum-sdk's facade beside X-Tenant-ID; used only when X-Tenant-ID is absent."""

log = logging.getLogger(__name__)


def key_id(key: str) -> str:
    """A stable, non-secret name for a key (rate limits, audit, logs)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class ApiKey:
    key: str = field(repr=False)
    tenant: str = DEFAULT_TENANT
    """The tenant the key is bound to; :data:`ANY_TENANT` lets it act for any tenant
    ("" counts as :data:`DEFAULT_TENANT`)."""
    role: str = DEFAULT_ROLE
    principal_id: str = ""

    @property
    def key_id(self) -> str:
        return key_id(self.key)

    @property
    def identity(self) -> str:
        """Who the key's caller is: its ``principal_id``, else ``key:<key id>``."""
        return self.principal_id or f"key:{self.key_id}"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    role: str
    principal_id: str
    """The caller's identity (:attr:`ApiKey.identity` of its key): submitter and approver."""
    key_id: str = ""
    """:func:`key_id` of the key that authenticated the caller."""


class KeyConfigError(ValueError):
    """A key source holds something that is not a key list (the message names the source)."""


class KeySourceError(RuntimeError):
    """A key source could not be read (the message names the source, never a key)."""


class ParameterStoreProtocol(Protocol):
    def get_parameter(self, **kwargs: Any) -> dict[str, Any]: ...


class SecretsManagerProtocol(Protocol):
    def get_secret_value(self, **kwargs: Any) -> dict[str, Any]: ...


def parse_keys(raw: str, source: str = KEYS_VAR) -> list[ApiKey]:
    raw = raw.strip()
    if not raw:
        return []
    if raw.startswith("["):
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError as exc:
            # exc.msg only ("Expecting value"): the document itself holds keys.
            raise KeyConfigError(f"{source} is not valid JSON: {exc.msg}") from None
        keys = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not str(entry.get("key") or "").strip():
                raise KeyConfigError(f"{source} entry {i} has no key")
            keys.append(
                ApiKey(
                    key=str(entry["key"]).strip(),
                    tenant=str(entry.get("tenant") or "").strip() or DEFAULT_TENANT,
                    role=str(entry.get("role") or "").strip() or DEFAULT_ROLE,
                    principal_id=str(entry.get("principal_id") or "").strip(),
                )
            )
        return keys
    return [ApiKey(key=k.strip()) for k in raw.split(",") if k.strip()]


def _aws_reason(exc: Exception) -> str:
    """What went wrong, without the response body (which may echo the value)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
    return type(exc).__name__


class KeyLoader:
    """Reads the keys of every configured source; AWS clients are built on first use and kept."""

    def __init__(self, env: Mapping[str, str] | None = None, *,
                 ssm: ParameterStoreProtocol | None = None,
                 secrets: SecretsManagerProtocol | None = None) -> None:
        self._env = os.environ if env is None else env
        self._ssm = ssm
        self._secrets = secrets

    def __call__(self) -> list[ApiKey]:
        env = self._env
        keys = parse_keys(env.get(KEYS_VAR, ""))
        if env.get(KEY_VAR):
            keys.append(ApiKey(key=env[KEY_VAR].strip()))
        path = env.get(KEYS_PATH_VAR)
        if path:
            try:
                with open(path, encoding="utf-8") as fh:
                    raw = fh.read()
            except OSError as exc:
                raise KeySourceError(f"{KEYS_PATH_VAR}: {exc.strerror or type(exc).__name__}"
                                     ) from None
            keys += parse_keys(raw, KEYS_PATH_VAR)
        name = env.get(KEYS_SSM_VAR)
        if name:
            keys += parse_keys(self._read_parameter(name), KEYS_SSM_VAR)
        for var in (KEYS_SECRET_ID_VAR, KEYS_SECRET_VAR):
            secret_id = env.get(var)
            if secret_id:
                keys += parse_keys(self._read_secret(var, secret_id), var)
        return keys

    def _read_parameter(self, name: str) -> str:
        try:
            if self._ssm is None:
                self._ssm = aws.client("ssm", self._env)
            answer = self._ssm.get_parameter(Name=name, WithDecryption=True)
            return str(answer["Parameter"]["Value"])
        except Exception as exc:
            raise KeySourceError(f"{KEYS_SSM_VAR}: {_aws_reason(exc)}") from None

    def _read_secret(self, var: str, secret_id: str) -> str:
        try:
            if self._secrets is None:
                self._secrets = aws.client("secretsmanager", self._env)
            answer = self._secrets.get_secret_value(SecretId=secret_id)
            if answer.get("SecretString") is not None:
                return str(answer["SecretString"])
            return bytes(answer["SecretBinary"]).decode("utf-8")
        except Exception as exc:
            raise KeySourceError(f"{var}: {_aws_reason(exc)}") from None


@dataclass(frozen=True, slots=True)
class KeyRefreshPolicy:
    ttl_s: float = 300.0
    """How long loaded keys are used before the sources are read again (CORDUM_API_KEYS_TTL_S)."""
    retry_s: float = 5.0
    """After a failed read, how long until the next try (capped by ``ttl_s``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KeyRefreshPolicy:
        env = os.environ if env is None else env
        raw = env.get(KEYS_TTL_VAR, "").strip()
        if not raw:
            return cls()
        try:
            ttl = float(raw)
        except ValueError:
            ttl = -1.0
        if not ttl > 0 or ttl == float("inf"):
            raise KeyConfigError(f"{KEYS_TTL_VAR}: must be a positive number of seconds")
        return cls(ttl_s=ttl)


class KeyRing:
    """The keys of one container, read again once they are ``policy.ttl_s`` old.

    A read that fails keeps the keys read before (logged as a warning, by
    source, never by value) and is tried again after ``policy.retry_s``. When
    no read has ever succeeded, requests get 503 rather than a misleading 401.
    """

    def __init__(self, load: Callable[[], list[ApiKey]],
                 policy: KeyRefreshPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._policy = policy or KeyRefreshPolicy()
        self._clock = clock
        self._keys: list[ApiKey] | None = None
        self._next_read = float("-inf")

    @classmethod
    def fixed(cls, keys: list[ApiKey]) -> KeyRing:
        return cls(lambda: list(keys), KeyRefreshPolicy(ttl_s=float("inf")))

    def keys(self) -> list[ApiKey]:
        now = self._clock()
        if now >= self._next_read:
            self._read(now)
        if self._keys is None:
            raise KeysUnavailable
        return self._keys

    def _read(self, now: float) -> None:
        try:
            keys = self._load()
        except (KeyConfigError, KeySourceError) as exc:
            self._failed(now, str(exc))
            return
        except Exception as exc:  # a message might quote what was read: name the type only
            self._failed(now, type(exc).__name__)
            return
        if not keys:
            log.error("no API keys configured (%s): every request is refused", KEYS_VAR)
        self._keys = keys
        self._next_read = now + self._policy.ttl_s

    def _failed(self, now: float, reason: str) -> None:
        self._next_read = now + min(self._policy.retry_s, self._policy.ttl_s)
        if self._keys is None:
            log.error("API keys could not be read (%s): requests get 503 until they can",
                      reason)
        else:
            log.warning("API keys could not be read again (%s): keeping the %d keys read before",
                        reason, len(self._keys))


def bound_tenant(key: ApiKey) -> str:
    """The tenant ``key`` acts for, or :data:`ANY_TENANT`."""
    return key.tenant.strip() or DEFAULT_TENANT


def resolve_tenant(headers: Mapping[str, str], key: ApiKey) -> str:
    """X-Tenant-ID, else X-Cordum-Tenant, else the key's tenant, else "default"."""
    bound = bound_tenant(key)
    return (headers.get(TENANT_HEADER, "").strip()
            or headers.get(CORDUM_TENANT_HEADER, "").strip()
            or (DEFAULT_TENANT if bound == ANY_TENANT else bound))


class Authenticator:
    def __init__(self, keys: list[ApiKey] | KeyRing) -> None:
        self._ring = keys if isinstance(keys, KeyRing) else KeyRing.fixed(keys)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> Authenticator:
        """Keys from the configured sources, read again every CORDUM_API_KEYS_TTL_S."""
        return cls(KeyRing(KeyLoader(env), KeyRefreshPolicy.from_env(env), clock))

    def _match(self, presented: str) -> ApiKey | None:
        found = None
        for entry in self._ring.keys():
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
            raise Unauthorized
        key = self._match(presented)
        if key is None:
            raise Unauthorized
        tenant = resolve_tenant(headers, key)
        bound = bound_tenant(key)
        # "*" names the key's reach, never a tenant a request may act in.
        if tenant == ANY_TENANT or (bound != ANY_TENANT and tenant != bound):
            raise Forbidden("tenant access denied")
        return Principal(tenant=tenant, role=key.role or DEFAULT_ROLE,
                         principal_id=key.identity, key_id=key.key_id)
