"""Where the API is and who is calling: flags, else the environment, else ``.cordum/local.env``.

``make up`` writes ``.cordum/local.env`` at the repository's root; a command run anywhere
below it finds that file by walking up from the current folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cordumctl.errors import ConfigError

URL_VAR = "CORDUM_API_URL"
KEY_VAR = "CORDUM_API_KEY"
TENANT_VAR = "CORDUM_TENANT_ID"
LOCAL_ENV = Path(".cordum") / "local.env"
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Connection:
    """The three things every call needs. ``key`` is never shown: ``repr`` masks it."""

    url: str
    """The API's base URL (a stage path like ``/prod`` included), without a trailing ``/``."""
    key: str
    """The API key, sent as ``X-API-Key``."""
    tenant: str
    """Sent as ``X-Tenant-ID``."""
    source: str = ""
    """Where the settings came from, for error messages: ``flags``, ``environment`` or a path."""

    def __repr__(self) -> str:
        return f"Connection(url={self.url!r}, key='***', tenant={self.tenant!r})"


def find_local_env(start: Path) -> Path | None:
    """The nearest ``.cordum/local.env`` in ``start`` or one of its parents."""
    for folder in (start, *start.parents):
        candidate = folder / LOCAL_ENV
        if candidate.is_file():
            return candidate
    return None


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines; ``#`` comments, blank lines and ``export`` prefixes allowed."""
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def resolve(*, url: str | None = None, key: str | None = None, tenant: str | None = None,
            environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Connection:
    """Each setting from its flag, else the environment, else the nearest local.env.

    Fails with the variable's name when the URL or the key is found nowhere.
    """
    env = os.environ if environ is None else environ
    file_values: dict[str, str] = {}
    file_path = find_local_env(cwd or Path.cwd())
    if file_path is not None:
        file_values = read_env_file(file_path)

    def pick(flag: str | None, var: str) -> tuple[str, str]:
        if flag:
            return flag, "flags"
        if env.get(var):
            return env[var], "environment"
        if file_values.get(var):
            return file_values[var], str(file_path)
        return "", ""

    url_value, url_from = pick(url, URL_VAR)
    key_value, _ = pick(key, KEY_VAR)
    tenant_value, _ = pick(tenant, TENANT_VAR)
    if not url_value:
        raise ConfigError(f"{URL_VAR} is not set (nor --url, nor in a {LOCAL_ENV} here or above)")
    if not key_value:
        raise ConfigError(f"{KEY_VAR} is not set (nor --key, nor in a {LOCAL_ENV} here or above)")
    return Connection(url=url_value.rstrip("/"), key=key_value,
                      tenant=tenant_value or DEFAULT_TENANT, source=url_from)
