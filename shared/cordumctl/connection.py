"""Where the API is and who is calling: flags, else the environment, else ``.cordum/local.env``.

The URL, the key and the tenant come together from one of these places, never mixed:
a key goes only to a URL named in the same place. ``make up`` writes
``.cordum/local.env`` at the repository's root; a command run anywhere below it finds that
file by walking up from the current folder, so that file may be anyone's, and its URL
never receives a key from the flags or the environment.

The live event stream may have a URL of its own (``--stream-url``, ``CORDUM_STREAM_URL``,
or that line in local.env); it receives the key too, so it comes from the same place as
the rest, and is the API's URL when that place names none.
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
STREAM_URL_VAR = "CORDUM_STREAM_URL"
LOCAL_ENV = Path(".cordum") / "local.env"
DEFAULT_TENANT = "default"
_VARS = (URL_VAR, KEY_VAR, TENANT_VAR, STREAM_URL_VAR)
_FLAGS = {URL_VAR: "--url", KEY_VAR: "--key"}


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
    stream_url: str = ""
    """The live event stream's base URL, without a trailing ``/``; the API's when unnamed."""

    def __repr__(self) -> str:
        return (f"Connection(url={self.url!r}, key='***', tenant={self.tenant!r}, "
                f"stream_url={self.stream_url!r})")

    def for_stream(self) -> Connection:
        """The same principal at the event stream's URL."""
        return Connection(url=self.stream_url or self.url, key=self.key, tenant=self.tenant,
                          source=self.source, stream_url=self.stream_url)


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
            environ: Mapping[str, str] | None = None, cwd: Path | None = None,
            stream_url: str | None = None) -> Connection:
    """The URL, key and tenant (and the stream's URL), all from one place.

    The flags when any of them is given (``--url`` and ``--key`` both required), else the
    environment when it sets any of the variables (``CORDUM_API_URL`` and
    ``CORDUM_API_KEY`` both required), else the nearest local.env (which must name both).
    The tenant is ``default`` when that place names none, the stream's URL the API's. A
    place that names only part fails with the missing name; the file is not read when the
    flags or environment decide.
    """
    if url or key or tenant or stream_url:
        return _complete({URL_VAR: url or "", KEY_VAR: key or "", TENANT_VAR: tenant or "",
                          STREAM_URL_VAR: stream_url or ""}, "flags")
    env = os.environ if environ is None else environ
    if any(env.get(var) for var in _VARS):
        return _complete(env, "environment")
    start = cwd or Path.cwd()
    file_path = find_local_env(start)
    if file_path is None:
        raise ConfigError(f"{URL_VAR} is not set: give --url and --key, set {URL_VAR} and "
                          f"{KEY_VAR}, or run `make up` (no {LOCAL_ENV} in {start} or above)")
    return _complete(read_env_file(file_path), str(file_path))


def _complete(values: Mapping[str, str], source: str) -> Connection:
    """The connection ``source`` names, or a one-line error saying what it leaves out."""
    for var in (URL_VAR, KEY_VAR):
        if values.get(var):
            continue
        if source == "flags":
            raise ConfigError(f"{_FLAGS[var]} is not given: with --url, --key, --tenant or "
                              "--stream-url, the URL and the key both come from flags (a key "
                              "is sent only to a URL named in the same place)")
        if source == "environment":
            named = ", ".join(v for v in _VARS if values.get(v))
            raise ConfigError(f"{var} is not set in the environment, which sets {named}: set "
                              f"{URL_VAR} and {KEY_VAR} both, or none of {', '.join(_VARS)} "
                              f"to use {LOCAL_ENV}")
        raise ConfigError(f"{var} is not set in {source}, which must name {URL_VAR} and "
                          f"{KEY_VAR} both (`make up` writes them)")
    return Connection(url=values[URL_VAR].rstrip("/"), key=values[KEY_VAR],
                      tenant=values.get(TENANT_VAR) or DEFAULT_TENANT, source=source,
                      stream_url=(values.get(STREAM_URL_VAR) or "").rstrip("/"))
