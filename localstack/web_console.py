"""The local console server: the dashboard and the API at one origin, routed as
CloudFront routes them on AWS.

    CORDUM_API_URL=... CORDUM_STREAM_URL=... python localstack/web_console.py

It listens on 127.0.0.1:8080 (``CONSOLE_HOST``, ``CONSOLE_PORT``) and sends

- ``/api/v1/stream`` and ``/api/v1/jobs/{id}/stream`` to the live event stream
  (``CORDUM_STREAM_URL``): Server-Sent Events passed on chunk by chunk as they arrive,
  a WebSocket upgrade proxied both ways, the browser offered what the stream answered
  of its ``Sec-WebSocket-Protocol`` (how a browser sends its key);
- every other ``/api/...``, and ``/health``, to the REST API (``CORDUM_API_URL``:
  LocalStack's API Gateway URL, stage prefix included): method, query, body and
  headers passed on, less the hop-by-hop ones, ``Host`` that of the API; the answer's
  status, headers and body passed back. A body over 6 MiB is refused with 413 and an
  answer slower than 29 s is a 504, API Gateway's limits; 502 when the API does not
  answer;
- everything else to the files of dashboard/dist (``CONSOLE_DIST``): a path that names
  a file gets it, never one outside dist/; a path without an extension that names none
  is one of the app's own routes and gets index.html; a missing file with an extension
  is a 404. index.html is ``no-cache``, /assets/ (content-hashed names)
  ``immutable``. With no dist/ yet, those paths get a page that says to run
  ``make dashboard``; the API is served all the same.

Every answer carries the headers of dashboard/security-headers.json, the file CloudFront's
response headers policy is built from, except Strict-Transport-Security: this server
speaks plain http on 127.0.0.1, and a browser ignores HSTS on an answer that did not come
over https (RFC 6797, 8.1), so sending it would only pretend. The supervisor needs no
health route: it restarts the server when it exits, and ``make up`` checks it still runs
after its start (a port in use ends it at once).

Runs under the project venv's Python (aiohttp), as a supervised service of ``make up``;
the proxies themselves are console_proxy.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import aiohttp
from aiohttp import web
from console_proxy import ProxyLimits, proxy_rest, proxy_stream  # localstack/console_proxy.py

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIST = ROOT / "dashboard" / "dist"
SECURITY_HEADERS = ROOT / "dashboard" / "security-headers.json"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
HSTS = "strict-transport-security"

STREAM_PATH = re.compile(r"^/api/v1/(stream|jobs/[^/]+/stream)$")
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"

NOT_BUILT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cordum console</title></head>
<body><h1>The dashboard is not built yet</h1>
<p>Run <code>make dashboard</code> (<code>make up</code> does it too), then reload this
page. The API answers here all the same: <a href="/health">/health</a>.</p></body></html>
"""

log = logging.getLogger("web_console")


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    api_url: str
    """The REST API base URL, LocalStack's stage prefix included (CORDUM_API_URL)."""
    stream_url: str
    """The live event stream's base URL (CORDUM_STREAM_URL)."""
    dist: Path = DEFAULT_DIST
    """The dashboard's build (CONSOLE_DIST)."""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    headers: Mapping[str, str] = field(default_factory=dict)
    """Set on every answer (:func:`security_headers`)."""
    limits: ProxyLimits = field(default_factory=ProxyLimits)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConsoleSettings:
        """Fails (SystemExit) naming the variable that is missing or wrong."""
        missing = [name for name in ("CORDUM_API_URL", "CORDUM_STREAM_URL") if not env.get(name)]
        if missing:
            raise SystemExit(f"web_console: {' and '.join(missing)} must be set")
        try:
            port = int(env.get("CONSOLE_PORT") or DEFAULT_PORT)
        except ValueError:
            raise SystemExit(
                f"web_console: CONSOLE_PORT is no port: {env['CONSOLE_PORT']!r}") from None
        return cls(
            api_url=env["CORDUM_API_URL"].rstrip("/"),
            stream_url=env["CORDUM_STREAM_URL"].rstrip("/"),
            dist=Path(env.get("CONSOLE_DIST") or DEFAULT_DIST),
            host=env.get("CONSOLE_HOST") or DEFAULT_HOST,
            port=port,
            headers=security_headers(),
        )


SETTINGS = web.AppKey("settings", ConsoleSettings)
CLIENT = web.AppKey("client", aiohttp.ClientSession)


def security_headers(path: Path = SECURITY_HEADERS) -> dict[str, str]:
    """The file's headers, less its ``_`` notes and HSTS (see the module's docstring)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in doc.items()
            if not name.startswith("_") and name.lower() != HSTS}


# ---------------------------------------------------------------- routing


def route(path: str) -> str:
    """``stream``, ``api`` or ``static``: the origin CloudFront sends ``path`` to."""
    if STREAM_PATH.match(path):
        return "stream"
    if path == "/health" or path.startswith("/api/"):
        return "api"
    return "static"


# ---------------------------------------------------------------- static files


def static_file(root: Path, url_path: str) -> Path | None:
    """The file of ``url_path`` under ``root`` (not checked to exist); None for a path
    that would leave ``root`` (``..``, a backslash, a NUL, a link out of it)."""
    if "\\" in url_path or "\0" in url_path or ".." in url_path.split("/"):
        return None
    base = root.resolve()
    candidate = (base / url_path.lstrip("/")).resolve()
    return candidate if candidate == base or candidate.is_relative_to(base) else None


def has_extension(url_path: str) -> bool:
    return PurePosixPath(url_path).suffix != ""


async def serve_static(request: web.Request) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        return web.Response(status=405, text="method not allowed\n",
                            headers={"Allow": "GET, HEAD"})
    dist = request.app[SETTINGS].dist
    index = dist / "index.html"
    path = request.path
    found = static_file(dist, path)
    if found is not None and found.is_file():
        cache = IMMUTABLE if path.startswith("/assets/") else NO_CACHE
        return web.FileResponse(found, headers={"Cache-Control": cache})
    if found is None or has_extension(path):
        return web.Response(status=404, text="not found\n", headers={"Cache-Control": NO_CACHE})
    if not index.is_file():
        return web.Response(status=503, text=NOT_BUILT_PAGE, content_type="text/html",
                            headers={"Cache-Control": "no-store"})
    # One of the app's own routes (/jobs/123): the app reads the path itself.
    return web.FileResponse(index, headers={"Cache-Control": NO_CACHE})


# ---------------------------------------------------------------- the app


async def dispatch(request: web.Request) -> web.StreamResponse:
    settings, client = request.app[SETTINGS], request.app[CLIENT]
    kind = route(request.path)
    if kind == "stream":
        return await proxy_stream(request, client, settings.stream_url, settings.limits)
    if kind == "api":
        return await proxy_rest(request, client, settings.api_url, settings.limits)
    return await serve_static(request)


def build_app(settings: ConsoleSettings) -> web.Application:
    app = web.Application()
    app[SETTINGS] = settings

    async def client(app: web.Application) -> AsyncIterator[None]:
        # No cookie jar: one session serves every browser, and cookies are theirs.
        # Bodies pass as they came, compressed or not.
        app[CLIENT] = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                            auto_decompress=False)
        yield
        await app[CLIENT].close()

    async def security(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in settings.headers.items():
            response.headers[name] = value

    app.cleanup_ctx.append(client)
    app.on_response_prepare.append(security)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ConsoleSettings.from_env(os.environ)
    log.info("console on http://%s:%d/: REST API %s, stream %s, files %s", settings.host,
             settings.port, settings.api_url, settings.stream_url, settings.dist)
    # Open streams would hold a stop for the whole grace period: a short one, then cut.
    web.run_app(build_app(settings), host=settings.host, port=settings.port,
                shutdown_timeout=2.0, handler_cancellation=True, print=None)


if __name__ == "__main__":
    main()
