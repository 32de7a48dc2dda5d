"""The gateway function behind a loopback HTTP server, as API Gateway hands it requests:
what the tests of cordum-sdk's namespaces call the published client against; and the
namespaces the client generates but does not list."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from cordum.gateway import app as gateway
from tests import helpers


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request as the gateway function's event, its answer written back."""

    def _serve(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else None
        query = dict(parse_qsl(url.query, keep_blank_values=True)) or None
        event = helpers.event(self.command, url.path, body, content_type=None,
                              headers=dict(self.headers.items()), query=query)
        resp = gateway.handle(event, None)
        content = (resp.get("body") or "").encode()
        headers = {**(resp.get("headers") or {}),
                   **{k: v[-1] for k, v in (resp.get("multiValueHeaders") or {}).items()}}
        self.send_response(resp["statusCode"])
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_PUT = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's names)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def loopback_gateway() -> Iterator[str]:
    """The gateway function behind an HTTP server on a free loopback port; its base URL.

    One request at a time (not a threading server): the gateway drives the process's one
    event loop per request while the test waits on the answer, so the loop is never
    driven from two threads at once."""
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def namespace(client: Any, package: str) -> Any:
    """The generated ``package``'s operations (``locks``, ``schemas``, ...) as a namespace of
    ``client``: cordum-sdk 0.1.0 generates them but its client does not list them."""
    from cordum_sdk._namespaces import ResourceNamespace, _load_package_operations

    return ResourceNamespace(owner=client, namespace_name=package,
                             operations=_load_package_operations(package), async_mode=False)
