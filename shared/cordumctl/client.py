"""The HTTP client: one ``httpx.Client`` per process, the headers of every call, and the
retries of 429 and 503.

The API says when to come back: every 429 and 503 carries ``Retry-After`` (seconds),
and a 503 names the part that is down in ``unavailable``. Such an answer means nothing
was done, so it is sent again, a POST included, after the server's delay, within
:class:`RetryPolicy`'s bounds. Any other error is raised at once as :class:`ApiError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx

from cordumctl.errors import ApiError, CliError, UnreachableError

if TYPE_CHECKING:
    from cordumctl.connection import Connection

RETRIED_STATUSES = frozenset({429, 503})
USER_AGENT = "cordumctl/0.1"


@dataclass(frozen=True)
class RetryPolicy:
    """How long a command keeps trying when the API answers 429 or 503."""

    max_attempts: int = 5
    """Calls in all, the first included."""
    default_delay_s: float = 1.0
    """The wait when an answer carries no usable ``Retry-After``."""
    max_delay_s: float = 30.0
    """A longer ``Retry-After`` is cut to this."""
    budget_s: float = 90.0
    """No retry is started when the waits so far and the next one would pass this."""


@dataclass(frozen=True)
class Timeouts:
    """Per-call limits of the HTTP transport."""

    connect_s: float = 5.0
    """To open the connection."""
    read_s: float = 35.0
    """To read the answer; above API Gateway's 29 s integration limit."""


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: a number, or an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def api_error(response: httpx.Response) -> ApiError:
    """The one-line error of a 4xx/5xx answer, from its JSON body when it has one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    message = body.get("error")
    if isinstance(message, dict):  # some gateways nest {"error": {"message": ...}}
        message = message.get("message")
    code = body.get("code") or body.get("error_code") or ""
    return ApiError(response.status_code, str(message or response.reason_phrase or "error"),
                    str(code), request_id=response.headers.get("x-request-id", ""),
                    unavailable=str(body.get("unavailable") or ""))


class ApiClient:
    """Calls of Cordum's HTTP API as one principal of one tenant."""

    def __init__(self, connection: Connection, *, transport: httpx.BaseTransport | None = None,
                 retry: RetryPolicy | None = None, timeouts: Timeouts | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 on_retry: Callable[[ApiError, float], None] | None = None) -> None:
        self.connection = connection
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._on_retry = on_retry
        limits = timeouts or Timeouts()
        self._http = httpx.Client(
            base_url=connection.url,
            transport=transport,
            timeout=httpx.Timeout(limits.read_s, connect=limits.connect_s),
            headers={"X-API-Key": connection.key, "X-Tenant-ID": connection.tenant,
                     "User-Agent": USER_AGENT, "Accept": "application/json"},
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, params: Mapping[str, Any] | None = None,
             headers: Mapping[str, str] | None = None) -> Any:
        return self.call("POST", path, body=body, params=params, headers=headers)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)

    def call(self, method: str, path: str, *, body: Any = None,
             params: Mapping[str, Any] | None = None,
             headers: Mapping[str, str] | None = None) -> Any:
        """The decoded JSON answer (``None`` for an empty one), after the retries."""
        return _decode(self._send(method, path, body=body, params=params, headers=headers))

    def get_with_headers(self, path: str, params: Mapping[str, Any] | None = None
                         ) -> tuple[Any, httpx.Headers]:
        """The decoded answer of a GET and its headers (where a bare array's page is told)."""
        response = self._send("GET", path, params=params)
        return _decode(response), response.headers

    def _send(self, method: str, path: str, *, body: Any = None,
              params: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None) -> httpx.Response:
        query = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
        content = None if body is None else json.dumps(body).encode()
        sent_headers = dict(headers or {})
        if content is not None:
            sent_headers["Content-Type"] = "application/json"
        waited = 0.0
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                response = self._http.request(method, path, params=query, content=content,
                                              headers=sent_headers)
            except httpx.HTTPError as exc:
                # The message names the URL and the failure; the headers (the key) never.
                raise UnreachableError(
                    f"cannot reach {self.connection.url}: {type(exc).__name__}: {exc}") from None
            if response.status_code < 400:
                return response
            error = api_error(response)
            if response.status_code not in RETRIED_STATUSES or attempt == self.retry.max_attempts:
                raise error
            delay = retry_after_s(response.headers.get("retry-after"))
            delay = min(self.retry.default_delay_s if delay is None else delay,
                        self.retry.max_delay_s)
            if waited + delay > self.retry.budget_s:
                raise error
            if self._on_retry is not None:
                self._on_retry(error, delay)
            self._sleep(delay)
            waited += delay
        raise CliError("unreachable: retry loop ended without an answer")  # pragma: no cover

    def pages(self, path: str, params: Mapping[str, Any] | None = None,
              *, follow: bool = True) -> Iterator[dict[str, Any]]:
        """The items of a ``{"items", "next_cursor"}`` list, page after page when ``follow``."""
        query = dict(params or {})
        while True:
            page = self.get(path, query)
            if isinstance(page, list):  # a bare array is the whole list
                yield from page
                return
            yield from (page or {}).get("items") or []
            cursor = (page or {}).get("next_cursor")
            if not follow or not cursor:
                return
            query["cursor"] = str(cursor)


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text
