"""The HTTP/1.1 side of the local Runtime API: keep-alive, bodies, JSON answers.

What any Runtime API request needs whatever it asks for; the routes and the
server's state are ``runtime_api``'s.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    """A keep-alive HTTP/1.1 handler answering JSON, quietly."""

    # The runtime client keeps its connection alive between calls.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm the
    # second one waits for the client's delayed ACK (tens of ms per call).
    disable_nagle_algorithm = True

    def _refuse(self) -> None:
        # Not the runtime this server was started for, nor the executor: nothing
        # about the server's state or paths is answered, and the body is not read
        # (so the connection cannot be reused).
        self.close_connection = True
        self._reply(HTTPStatus.FORBIDDEN, message("forbidden"))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()  # the empty line after the last chunk
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(
        self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {"Content-Type": "application/json"}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except ConnectionError:
            # The runtime process is gone (killed after a timeout, or on stop).
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # one line per long poll would drown the executor's log


def message(text: str) -> bytes:
    """A JSON answer body: {"message": text}."""
    return json.dumps({"message": text}).encode()
