"""The SQS adapter of the bridge: SendMessageBatch on the event loop, no worker thread.

boto3 is synchronous: the bridge used to run each send in a thread
(``asyncio.to_thread``), one blocked thread and two GIL hand-overs per batch.
Here the call is made by the event loop itself: SQS's JSON protocol (a POST
with ``X-Amz-Target: AmazonSQS.<Operation>``) over keep-alive HTTP/1.1
connections, signed with botocore's SigV4 signer. boto3 still resolves the
endpoint (``AWS_ENDPOINT_URL(_SQS)``, LocalStack) and the credentials chain, and
``cordum.aws`` still sets the timeouts: worst case for one call 2 x (1 s connect
+ 3 s read), inside the bridge's stop window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cordum.aws import DEFAULT_TIMEOUTS, AwsTimeouts
from cordum.bus.queue import ATTR_JOB_ID, BatchReport, QueueMessage, QueueUnavailable

_TARGET_PREFIX = "AmazonSQS."
_CONTENT_TYPE = "application/x-amz-json-1.0"
_THROTTLED = frozenset({"Throttling", "ThrottlingException", "ThrottledException",
                        "RequestThrottled", "RequestThrottledException",
                        "TooManyRequestsException", "RequestLimitExceeded"})
_MAX_IDLE = 4
"""Keep-alive connections kept between calls (the bridge sends on three routes at most)."""
_RETRY_PAUSE_S = 0.1
"""Longest pause before the second attempt (full jitter)."""
ENV_CALL_LOG = "BRIDGE_SQS_CALL_LOG"
"""Set to 1: one INFO line per SendMessageBatch with its duration (tests/bench/bench_dispatch)."""
log = logging.getLogger(__name__)


class SqsError(Exception):
    """SQS answered with an error (or did not answer)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: bytes
    keep_alive: bool


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, request: bytes) -> _Response:
        self.writer.write(request)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        status = int(rest.split(" ", 1)[0])
        headers: dict[str, str] = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._chunked()
        elif "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        else:
            body, keep_alive = await self.reader.read(), False
        return _Response(status, body, keep_alive)

    async def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._trailer()
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)

    async def _trailer(self) -> None:
        while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
            pass

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class SqsClient:
    """SQS's JSON protocol on the event loop: keep-alive connections, SigV4, two attempts."""

    def __init__(self, endpoint_url: str, region: str, credentials: Any = None, *,
                 timeouts: AwsTimeouts = DEFAULT_TIMEOUTS) -> None:
        """``credentials``: botocore credentials; None resolves boto3's chain on first use."""
        url = urlsplit(endpoint_url)
        self._tls = url.scheme == "https"
        default_port = 443 if self._tls else 80
        self._host = url.hostname or ""
        self._port = url.port or default_port
        # SigV4 signs the Host header as botocore writes it: no default port.
        self._authority = self._host if self._port == default_port else f"{self._host}:{self._port}"
        self._path = url.path or "/"
        self._request_url = f"{url.scheme}://{self._authority}{self._path}"
        self.endpoint_url = self._request_url.rstrip("/")
        self.region = region
        self._credentials = credentials
        self._timeouts = timeouts
        self._ssl = ssl.create_default_context() if self._tls else None
        self._idle: list[_Connection] = []

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SqsClient:
        """Endpoint and region as ``cordum.aws.client("sqs")`` resolves them."""
        from cordum import aws

        boto = aws.client("sqs", env)
        return cls(boto.meta.endpoint_url, boto.meta.region_name)

    async def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """One SQS operation; raises ``SqsError`` once every attempt failed."""
        body = json.dumps(params, separators=(",", ":")).encode()
        attempts = max(self._timeouts.attempts, 1)
        for attempt in range(1, attempts + 1):
            try:
                return await self._call_once(operation, body)
            except SqsError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
            await asyncio.sleep(random.uniform(0, _RETRY_PAUSE_S))
        raise AssertionError("unreachable")

    async def _call_once(self, operation: str, body: bytes) -> dict[str, Any]:
        request = await self._signed(operation, body)
        try:
            response = await self._send(request)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError) as exc:
            raise SqsError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        try:
            answer = json.loads(response.body) if response.body else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {}
        elif response.status == 200:
            return answer
        # JSON protocol errors: {"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": ...}
        code = str(answer.get("__type", "")).rpartition("#")[2]
        message = answer.get("message") or answer.get("Message") or ""
        retryable = response.status >= 500 or response.status == 429 or code in _THROTTLED
        raise SqsError(f"HTTP {response.status} {code or '?'}: {message or ''}".strip(),
                       retryable=retryable)

    async def _signed(self, operation: str, body: bytes) -> bytes:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        headers = {"Host": self._authority, "Content-Type": _CONTENT_TYPE,
                   "X-Amz-Target": _TARGET_PREFIX + operation}
        request = AWSRequest("POST", self._request_url, data=body, headers=headers)
        SigV4Auth(await self._frozen_credentials(), "sqs", self.region).add_auth(request)
        lines = [f"POST {self._path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in request.headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _frozen_credentials(self) -> Any:
        from botocore.credentials import RefreshableCredentials

        if self._credentials is None:
            self._credentials = await asyncio.to_thread(_default_credentials)
        creds = self._credentials
        # A refresh (container or instance credentials) is an HTTP call made by
        # botocore synchronously: in a thread, and only when one is due.
        if isinstance(creds, RefreshableCredentials) and creds.refresh_needed():
            return await asyncio.to_thread(creds.get_frozen_credentials)
        return creds.get_frozen_credentials()

    async def _send(self, request: bytes) -> _Response:
        while self._idle:
            conn = self._idle.pop()
            try:
                response = await asyncio.wait_for(conn.exchange(request), self._timeouts.read_s)
            except (OSError, EOFError, asyncio.IncompleteReadError):
                # A kept-alive connection the server had closed meanwhile: try the next.
                conn.close()
                continue
            except BaseException:
                conn.close()
                raise
            return self._keep(conn, response)
        conn = await self._open()
        try:
            response = await asyncio.wait_for(conn.exchange(request), self._timeouts.read_s)
        except BaseException:
            conn.close()
            raise
        return self._keep(conn, response)

    async def _open(self) -> _Connection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port, ssl=self._ssl),
            self._timeouts.connect_s)
        return _Connection(reader, writer)

    def _keep(self, conn: _Connection, response: _Response) -> _Response:
        if response.keep_alive and len(self._idle) < _MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return response

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _default_credentials() -> Any:
    import boto3

    creds = boto3.session.Session().get_credentials()
    if creds is None:
        raise SqsError("no AWS credentials found", retryable=False)
    return creds


class SqsQueueSink:
    """``QueueSink`` over SQS SendMessageBatch."""

    def __init__(self, queue_url: str, client: SqsClient | None = None) -> None:
        self.queue_url = queue_url
        self._client = client if client is not None else SqsClient.from_env()
        self._call_log = os.environ.get(ENV_CALL_LOG, "") not in ("", "0")

    async def send_batch(self, messages: Sequence[QueueMessage]) -> BatchReport:
        entries = [
            {
                "Id": m.id,
                "MessageBody": m.body,
                "MessageAttributes": {
                    name: {"DataType": "String", "StringValue": value}
                    for name, value in m.attributes.items()
                },
            }
            for m in messages
        ]
        started, t0 = time.time(), time.perf_counter()
        try:
            response = await self._client.call(
                "SendMessageBatch", {"QueueUrl": self.queue_url, "Entries": entries})
        except Exception as exc:  # SqsError, and anything unforeseen: retried by a NAK
            raise QueueUnavailable(f"SendMessageBatch {self.queue_url}: {exc}") from exc
        if self._call_log:
            log.info("sqs call SendMessageBatch queue=%s entries=%d started=%.6f ms=%.3f "
                     "job_ids=%s", self.queue_url.rsplit("/", 1)[-1], len(entries), started,
                     (time.perf_counter() - t0) * 1000,
                     ",".join(m.attributes.get(ATTR_JOB_ID, "") for m in messages))
        accepted = frozenset(item["Id"] for item in response.get("Successful") or [])
        refused = {
            item["Id"]: f"{item.get('Code', '?')}: {item.get('Message', '')}".strip()
            for item in response.get("Failed") or []
        }
        return BatchReport(accepted=accepted, refused=refused)
