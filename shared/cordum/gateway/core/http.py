"""Request and response helpers every feature's routes share: the caller, the body, the
query parameters (limit, cursor, times) and the JSON answer.

The app imports this module at cold start for the body and path checks and the JSON
answer, before it knows which feature a request needs; so the shared clients, the rate
limiter, paging and settings (which bring pydantic and the store) are imported by the
helpers that use them, on the first request that does.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from itertools import accumulate
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response

from cordum.gateway.core.auth import Principal
from cordum.gateway.core.errors import (
    Forbidden,
    InvalidRequest,
    PayloadTooLarge,
    Throttled,
    Unauthorized,
)
from cordum.labels import has_control_chars

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.paging import Position


ADMIN = "admin"
_NOBODY = Principal(tenant="", role="", principal_id="")
"""A caller not known yet: ``ratelimit.key_id`` names its credential by a digest."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and arrays a request body may have."""

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type="application/json",
                    body=json.dumps(body, separators=(",", ":")), headers=headers or {})


def headers(event: BaseProxyEvent) -> dict[str, str]:
    """The request's headers with lower-case names, built once per request (the caller's
    authentication and the route both read them) and kept on the event: read them, never
    change them."""
    seen = vars(event)
    lowered: dict[str, str] | None = seen.get("_cordum_headers")
    if lowered is None:
        lowered = seen["_cordum_headers"] = {k.lower(): v for k, v in
                                            (event.headers or {}).items()}
    return lowered


def principal(event: BaseProxyEvent) -> Principal:
    """The caller, authenticated (401), authorised for the tenant asked for (403) and
    within its key's rate limit (429). A refusal is an audit event (``auth.failed`` in
    the system chain, ``auth.rate_limited`` in the key's tenant's), sampled: at most
    one per credential and minute, and 60 of each type a minute in a chain."""
    return principal_reading(event, None)[0]


def principal_reading(event: BaseProxyEvent,
                      keys_for: Callable[[Principal], Sequence[str]] | None,
                      ) -> tuple[Principal, list[Any] | None]:
    """:func:`principal`, and the values of the keys ``keys_for(caller)`` names, read in
    the rate limiter's round trip; None when that round trip did not read them (limiting
    off, or Redis slow: the caller then reads them itself)."""
    from cordum.gateway.core import deps, ratelimit

    hdrs = headers(event)
    try:
        who = deps.authenticator().authenticate(hdrs)
    except (Unauthorized, Forbidden) as exc:
        _audit_refusal(event, hdrs, exc)
        raise
    reads = keys_for(who) if keys_for is not None else ()
    try:
        return who, ratelimit.check(ratelimit.key_id(who, hdrs), reads)
    except Throttled:
        _audit_throttled(event, who)
        raise


def _audit_refusal(event: BaseProxyEvent, hdrs: dict[str, str],
                   exc: Unauthorized | Forbidden) -> None:
    """``auth.failed``: who it was is unknown, so the credential is named by a digest
    (never itself), and the tenant asked for is only what the request claimed."""
    from cordum.gateway.core import ratelimit
    from cordum.store.audit_trail import SYSTEM_TENANT, governance

    credential = ratelimit.key_id(_NOBODY, hdrs)
    claimed = (hdrs.get("x-tenant-id") or hdrs.get("x-cordum-tenant") or "")[:128]
    audit = governance("auth.failed", SYSTEM_TENANT, "", credential, reason=exc.message,
                       extra={"status": exc.status, "claimed_tenant": claimed,
                              "method": event.http_method or "",
                              "path": (event.path or "")[:256]})
    _record_sampled(audit, credential)


def _audit_throttled(event: BaseProxyEvent, who: Principal) -> None:
    from cordum.store.audit_trail import governance

    audit = governance("auth.rate_limited", who.tenant, who.principal_id, who.key_id,
                       extra={"method": event.http_method or "",
                              "path": (event.path or "")[:256]})
    _record_sampled(audit, who.key_id or who.principal_id)


def _record_sampled(audit: Any, bucket: str) -> None:
    """Record a refusal's event; the refusal's answer stands whatever happens here."""
    import logging

    from cordum import runtime
    from cordum.gateway.core import deps

    try:
        runtime.run(deps.audit_trail().record_sampled(audit, bucket))
    except Exception as exc:  # the caller's answer is the refusal, never this
        logging.getLogger(__name__).warning("audit: %s not recorded: %s", audit.type, exc)


def reaches_every_tenant(event: BaseProxyEvent, probe_prefix: str) -> bool:
    """Whether the caller's key may act for a tenant no key is bound to (its tenant is
    ``*``): it is asked to authenticate for a fresh random tenant under
    ``probe_prefix``, which only such a key can."""
    import uuid

    from cordum.gateway.core import deps

    probe = {**headers(event), "x-tenant-id": probe_prefix + uuid.uuid4().hex}
    probe.pop("x-cordum-tenant", None)
    try:
        deps.authenticator().authenticate(probe)
    except Forbidden:
        return False
    return True


def require_role(who: Principal, *roles: str) -> None:
    """403 unless ``who`` has one of ``roles`` (admin always passes)."""
    if who.role != ADMIN and who.role not in roles:
        raise Forbidden("forbidden", "forbidden")


def check_path(path: object) -> None:
    """400 when the request path holds a control character, raw or percent-encoded:
    ids taken from it end up in keys, logs and headers."""
    text = path if isinstance(path, str) else ""
    if has_control_chars(text) or has_control_chars(unquote(text)):
        raise InvalidRequest("path contains a control character")


def body_text(raw_event: dict[str, Any]) -> str | None:
    """The request body as text that is valid UTF-8; a base64 body
    (``isBase64Encoded``) is decoded first. 400 for anything else."""
    raw = raw_event.get("body")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise InvalidRequest("request body must be text")
    if raw_event.get("isBase64Encoded"):
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("request body is not valid base64") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("request body is not valid UTF-8") from None
    try:
        raw.encode("utf-8")  # a lone surrogate is text Python holds but no UTF-8
    except UnicodeEncodeError:
        raise InvalidRequest("request body is not valid UTF-8") from None
    return raw


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether objects and arrays in ``text`` nest deeper than ``limit``, found without
    recursion (the JSON decoder recurses once per level and would overflow first)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def bounded_body(event: BaseProxyEvent) -> None:
    """413 when the body is larger than the configured limit (CORDUM_MAX_BODY_BYTES)."""
    from cordum.gateway.core.models import MAX_BODY_BYTES_ENV, max_body_bytes

    cap = max_body_bytes()
    if len((event.body or "").encode()) > cap:
        raise PayloadTooLarge(f"request body larger than {cap} bytes ({MAX_BODY_BYTES_ENV})")


def json_body(event: BaseProxyEvent, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object: 400 unless it is one, at most :data:`MAX_JSON_DEPTH`
    levels deep, with every string valid UTF-8."""
    raw = event.body
    if not raw:
        if not required:
            return {}
        raise InvalidRequest("request body is required")
    if json_too_deep(raw):
        raise InvalidRequest(
            f"request body is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidRequest("request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(raw):
        try:
            # "\ud800" escapes decode to a lone surrogate, which no store can write.
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest("request body is not valid UTF-8") from None
    return body


def query(event: BaseProxyEvent, name: str, default: str = "") -> str:
    return (event.query_string_parameters or {}).get(name) or default


def limit(event: BaseProxyEvent, default: int = 50, maximum: int = 1000) -> int:
    """The ``limit`` query parameter: 400 unless a positive integer; clamped to ``maximum``."""
    raw = query(event, "limit")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest("limit must be an integer") from None
    if value <= 0:
        raise InvalidRequest("limit must be positive")
    return min(value, maximum)


def cursor(event: BaseProxyEvent) -> Position | None:
    """The ``cursor`` query parameter as a position (None: the first page); 400 when it
    is none (:func:`~cordum.gateway.core.paging.parse_cursor`)."""
    from cordum.gateway.core.paging import parse_cursor

    return parse_cursor(query(event, "cursor"))


def time_query(event: BaseProxyEvent, name: str) -> int | None:
    """A time query parameter (``updated_after``, ...) in epoch µs; None when absent,
    400 when it is neither RFC 3339 nor an epoch number."""
    from cordum.gateway.core.times import parse_time_us

    raw = query(event, name)
    if not raw:
        return None
    try:
        return parse_time_us(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be an RFC 3339 time or an epoch number") from None
