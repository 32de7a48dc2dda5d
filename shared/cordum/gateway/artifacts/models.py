"""What the artifact routes take: an inline artifact (cordum-sdk's
``CreateArtifactRequest``, and Cordum's plain ``content``), a large artifact's upload
request, the list's page (``limit``, ``cursor``) and the memory read's pointer.

Bounds: a body of at most :data:`MAX_REQUEST_BYTES` (413 beyond), content of at most
``MAX_INLINE_BYTES`` decoded (413), an upload of at most ``MAX_UPLOAD_BYTES`` (413),
:data:`MAX_LABELS` labels of :data:`MAX_LABEL_CHARS` characters each at most (400), a
content type of :data:`MAX_CONTENT_TYPE_CHARS` (400). A list's ``limit`` is a positive
integer (400 ``INVALID_LIMIT``; above :data:`MAX_LIST_LIMIT` it is clamped) and its
``cursor`` a ``next_cursor`` the list answered (400 ``INVALID_CURSOR``), the codes of
the audit events' list.
"""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum.gateway.core.errors import InvalidRequest, PayloadTooLarge
from cordum.gateway.core.models import no_default
from cordum.labels import has_control_chars
from cordum.store.artifact_index import Position
from cordum.store.artifacts import (
    MAX_INLINE_BYTES,
    MAX_UPLOAD_BYTES,
    RetentionError,
    retention_class,
)

MAX_REQUEST_BYTES = 6 * 1024 * 1024 - 64 * 1024
"""A create body beyond this is 413 (Lambda takes 6 MB; base64 of 4 MiB is 5.6 MB)."""
MAX_LABELS = 32
MAX_LABEL_CHARS = 256
MAX_CONTENT_TYPE_CHARS = 255
DEFAULT_CONTENT_TYPE = "application/octet-stream"
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 200

_OPEN = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})


def _content_type(value: str | None) -> str:
    text = (value or "").strip() or DEFAULT_CONTENT_TYPE
    if len(text) > MAX_CONTENT_TYPE_CHARS or has_control_chars(value or ""):
        raise ValueError(f"must be at most {MAX_CONTENT_TYPE_CHARS} printable characters")
    return text


def _labels(value: dict[str, str] | None) -> dict[str, str]:
    labels = value or {}
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    for key, item in labels.items():
        if not key.strip() or len(key) > MAX_LABEL_CHARS or len(item) > MAX_LABEL_CHARS:
            raise ValueError(f"names must be non-empty and names and values at most "
                             f"{MAX_LABEL_CHARS} characters")
        if has_control_chars(key) or has_control_chars(item):
            raise ValueError("must not contain control characters")
    return dict(labels)


def _retention(value: str | None) -> str:
    try:
        return retention_class(value)
    except RetentionError as exc:
        raise ValueError(str(exc)) from None


class _ArtifactFields(BaseModel):
    model_config = _OPEN

    content_type: str = Field(default=DEFAULT_CONTENT_TYPE, json_schema_extra=no_default,
                              description="MIME type; application/octet-stream when absent.")
    retention: str = Field(default="standard", json_schema_extra=no_default,
                           description="short (1 day), standard (7 days, the default) or "
                                       "audit (30 days).")
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra=no_default,
                                   description=f"At most {MAX_LABELS}; tenant_id, if given, "
                                               "must be the caller's tenant.")

    @field_validator("content_type", mode="before")
    @classmethod
    def _type(cls, value: object) -> object:
        return _content_type(value) if value is None or isinstance(value, str) else value

    @field_validator("retention", mode="before")
    @classmethod
    def _class(cls, value: object) -> object:
        return _retention(value) if value is None or isinstance(value, str) else value

    @field_validator("labels", mode="before")
    @classmethod
    def _none_labels(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("labels")
    @classmethod
    def _bounded(cls, value: dict[str, str]) -> dict[str, str]:
        return _labels(value)


class CreateArtifactRequest(_ArtifactFields):
    """POST /api/v1/artifacts: content_base64, or Cordum's plain-text content."""

    content_base64: str | None = Field(default=None, json_schema_extra=no_default,
                                       description="The content, base64 (standard alphabet).")
    content: str | None = Field(default=None, json_schema_extra=no_default,
                                description="Text content (UTF-8), when content_base64 is "
                                            "absent.")

    def data(self) -> bytes:
        """The content's bytes: 400 when absent, empty or not base64; 413 when larger
        than the inline limit."""
        if self.content_base64:
            if len(self.content_base64) > (MAX_INLINE_BYTES + 2) // 3 * 4 + 4:
                raise _too_large()
            try:
                data = base64.b64decode(self.content_base64, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequest("content_base64 is not valid base64",
                                     "invalid_base64") from None
        else:
            data = (self.content or "").encode("utf-8", "surrogatepass")
        if not data:
            raise InvalidRequest("content_base64 is required (or content)", "content_required")
        if len(data) > MAX_INLINE_BYTES:
            raise _too_large()
        return data


class ArtifactUploadRequest(_ArtifactFields):
    """POST /api/v1/artifacts/uploads: a large artifact, uploaded to S3 by the client."""

    size_bytes: int = Field(description=f"The exact size to upload, 1 to {MAX_UPLOAD_BYTES}.")

    @field_validator("size_bytes")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be positive")
        return value

    def checked_size(self) -> int:
        if self.size_bytes > MAX_UPLOAD_BYTES:
            raise PayloadTooLarge(f"artifact larger than {MAX_UPLOAD_BYTES} bytes")
        return self.size_bytes


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(f"artifact larger than {MAX_INLINE_BYTES} bytes inline: upload it "
                           "with POST /api/v1/artifacts/uploads")


def memory_key(ptr: str, key: str) -> tuple[str, str]:
    """(pointer, key) of a memory read from its ``ptr`` and ``key`` parameters (quotes
    around either are dropped, a ``key`` may be a pointer): 400 when both are absent."""
    ptr, key = ptr.strip().strip("\"'"), key.strip().strip("\"'")
    if not ptr and not key:
        raise InvalidRequest("missing ptr or key", "missing_pointer")
    if key.startswith("redis://"):
        ptr, key = key, ""
    if not key:
        if not ptr.startswith("redis://"):
            raise InvalidRequest("ptr must be a redis:// pointer", "invalid_pointer")
        key = ptr[len("redis://"):]
    if len(key) > 512 or has_control_chars(key):
        raise InvalidRequest("key is too long or holds control characters", "invalid_pointer")
    return "redis://" + key, key


def list_limit(raw: str) -> int:
    """``limit``: default :data:`DEFAULT_LIST_LIMIT`, clamped to :data:`MAX_LIST_LIMIT`."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_LIST_LIMIT
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
        raise InvalidRequest("limit must be a positive integer", "INVALID_LIMIT")
    return min(int(raw), MAX_LIST_LIMIT)


def list_cursor(raw: str) -> Position | None:
    """``cursor``: where the page starts (None: from the newest)."""
    if not raw.strip():
        return None
    try:
        return Position.decode(raw)
    except ValueError:
        raise InvalidRequest("cursor is not a next_cursor of this list",
                             "INVALID_CURSOR") from None
