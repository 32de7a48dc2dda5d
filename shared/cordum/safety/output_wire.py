"""What both ends of the output policy service share: its method names, size bounds,
the decision values and the JSON body encoding (the wire format is described in
:mod:`cordum.safety.output_service`).

The scheduler's side (the result function's client) imports only this, not the policy's
document models nor the service: a result function's cold start does not build the
pydantic models of a policy it never evaluates.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

SERVICE_NAME = "cordum.output.v1.OutputPolicy"
CHECK_META_METHOD = f"/{SERVICE_NAME}/CheckMeta"
CHECK_CONTENT_METHOD = f"/{SERVICE_NAME}/CheckContent"
CHECK_RESULT_METHOD = f"/{SERVICE_NAME}/CheckResult"
MAX_CONTENT_BYTES = 2 * 1024 * 1024
MAX_MESSAGE_BYTES = MAX_CONTENT_BYTES + 256 * 1024
"""A content request with JSON escaping and metadata fits in this (channel option)."""


class OutputDecision(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"
    QUARANTINE = "QUARANTINE"
    REDACT = "REDACT"


class InvalidRequest(ValueError):
    """The request body does not follow the wire format."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("body must be a JSON object")
    return doc
