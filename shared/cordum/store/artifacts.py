"""Artifacts: content named by a ``redis://art:<id>`` pointer, and what is known of it.

An artifact is kept in one of two places, and its metadata in Redis either way:

- ``art:<id>``: the content itself, for an artifact sent inline (at most
  :data:`MAX_INLINE_BYTES`), written with its metadata in one transaction;
- an S3 object ``artifacts/<retention>/<id>`` of the artifacts bucket, for a large
  one uploaded by the client through a presigned URL (:mod:`cordum.store.artifact_objects`).

``art:meta:<id>`` holds the metadata as JSON: the tenant that made the artifact (the
only one that may read it), content type, size, retention class, labels, creation time
and, for an S3-held artifact, its bucket and object key. Both keys expire with the
retention class (:data:`RETENTION_TTL_S`), as the bucket's lifecycle rules expire the
objects under each class's prefix.

``artidx:<tenant>`` lists each tenant's artifacts, newest first
(:mod:`cordum.store.artifact_index`): written in the transaction that writes the
metadata, so making an artifact is still one round trip.

Every read or write here is one Redis round trip, except a page of the list: two (the
ids, then their metadata), and a third when some of them had expired.
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.protocol import POINTER_SCHEME
from cordum.store import artifact_index
from cordum.store.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.store.artifact_index import Position

KEY_PREFIX = "art:"
META_PREFIX = "art:meta:"
OBJECT_PREFIX = "artifacts/"
"""Every S3 object of an artifact is under this prefix, then its retention class."""

RETENTION_TTL_S: dict[str, int] = {
    "short": 24 * 3600,
    "standard": 7 * 24 * 3600,
    "audit": 30 * 24 * 3600,
}
"""Cordum's retention classes and how long each keeps an artifact: 1, 7 and 30 days."""
DEFAULT_RETENTION = "standard"
LONGEST_RETENTION_MS = max(RETENTION_TTL_S.values()) * 1000
"""An index entry older than this has expired, whatever its class."""

MAX_INLINE_BYTES = 4 * 1024 * 1024
"""The largest artifact sent inline (decoded). Its base64 (5.6 MB) still fits, with the
JSON around it, in the 6 MB a Lambda function may take or answer."""
MAX_UPLOAD_BYTES = 5 * 1024**3
"""The largest artifact uploaded to S3: the most one PUT may carry."""

STORAGE_REDIS = "redis"
STORAGE_S3 = "s3"

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RetentionError(ValueError):
    """A retention class that is not one of :data:`RETENTION_TTL_S`."""


def retention_class(raw: str | None) -> str:
    """The retention class ``raw`` names (case and spaces ignored); empty is standard."""
    name = (raw or "").strip().lower()
    if not name:
        return DEFAULT_RETENTION
    if name not in RETENTION_TTL_S:
        raise RetentionError(f"retention must be one of {', '.join(RETENTION_TTL_S)}")
    return name


def content_key(artifact_id: str) -> str:
    return KEY_PREFIX + artifact_id


def meta_key(artifact_id: str) -> str:
    return META_PREFIX + artifact_id


def pointer(artifact_id: str) -> str:
    """``redis://art:<id>``, the pointer Cordum gives an artifact."""
    return POINTER_SCHEME + content_key(artifact_id)


def object_key(retention: str, artifact_id: str) -> str:
    """The S3 key of a large artifact: its retention class is the lifecycle's prefix."""
    return f"{OBJECT_PREFIX}{retention}/{artifact_id}"


def artifact_id(ref: str) -> str | None:
    """The id an artifact reference names, else None: ``redis://art:<id>``, ``art:<id>``
    or the bare id. The metadata key (``art:meta:...``) names no artifact."""
    text = ref.strip()
    if text.startswith(POINTER_SCHEME):
        text = text[len(POINTER_SCHEME):]
        if not text.startswith(KEY_PREFIX):
            return None
    if text.startswith(KEY_PREFIX):
        text = text[len(KEY_PREFIX):]
    return text if _ID.match(text) else None


def now_rfc3339(when: datetime | None = None) -> str:
    at = when or datetime.now(UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> tuple[str, int]:
    """Now as ``created_at`` (RFC 3339, ms) and as the index's score (epoch ms)."""
    at = datetime.now(UTC)
    return now_rfc3339(at), int(at.timestamp() * 1000)


@dataclass(slots=True)
class ArtifactMeta:
    """What ``art:meta:<id>`` holds."""

    tenant: str
    content_type: str
    size_bytes: int
    retention: str
    labels: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    storage: str = STORAGE_REDIS
    bucket: str = ""
    object_key: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> ArtifactMeta | None:
        """The metadata, or None when the stored value is not ours (then nobody reads it)."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("tenant"), str):
            return None
        raw_labels = data.get("labels")
        labels: dict[Any, Any] = raw_labels if isinstance(raw_labels, dict) else {}
        try:
            return cls(tenant=data["tenant"], content_type=str(data.get("content_type") or ""),
                       size_bytes=int(data.get("size_bytes") or 0),
                       retention=str(data.get("retention") or DEFAULT_RETENTION),
                       labels={str(k): str(v) for k, v in labels.items()},
                       created_at=str(data.get("created_at") or ""),
                       storage=str(data.get("storage") or STORAGE_REDIS),
                       bucket=str(data.get("bucket") or ""),
                       object_key=str(data.get("object_key") or ""))
        except (TypeError, ValueError):
            return None

    def readable_by(self, tenant: str) -> bool:
        return bool(self.tenant) and self.tenant == tenant

    def public(self) -> dict[str, Any]:
        """The metadata a reader is shown (never the bucket or object key)."""
        return {"content_type": self.content_type, "size_bytes": self.size_bytes,
                "created_at": self.created_at, "retention": self.retention,
                "labels": dict(self.labels), "storage": self.storage}


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    meta: ArtifactMeta
    content: bytes | None
    """The content of a Redis-held artifact; None for an S3-held one."""


@dataclass(frozen=True, slots=True)
class ListedArtifact:
    art_id: str
    meta: ArtifactMeta
    position: Position
    """Its place in the list (``position.score`` is its creation time, epoch ms)."""


@dataclass(frozen=True, slots=True)
class ArtifactPage:
    items: list[ListedArtifact]
    """Newest first; fewer than asked for when some had expired."""
    end: Position | None
    """Where the next page starts once every item is taken; None when none follows."""


class ArtifactStore:
    """The artifacts in Redis. Who may read one is the caller's check
    (:meth:`ArtifactMeta.readable_by`): the gateway's and the worker's rules differ."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis

    async def put(self, tenant: str, content: bytes, *, content_type: str, retention: str,
                  labels: Mapping[str, str]) -> tuple[str, ArtifactMeta]:
        """Keep ``content`` inline; its pointer and metadata. One MULTI round trip (the
        content, the metadata and the tenant's index)."""
        art_id = str(uuid.uuid4())
        created_at, created_ms = _now()
        meta = ArtifactMeta(tenant=tenant, content_type=content_type, size_bytes=len(content),
                            retention=retention, labels=dict(labels), created_at=created_at)
        ttl = RETENTION_TTL_S[retention]
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.set(content_key(art_id), content, ex=ttl)
            pipe.set(meta_key(art_id), meta.to_json(), ex=ttl)
            artifact_index.add(pipe, tenant, art_id, created_ms, LONGEST_RETENTION_MS)
            await pipe.execute()
        except Exception as exc:
            raise StoreError(f"write artifact: {exc}") from exc
        return pointer(art_id), meta

    async def reserve(self, tenant: str, size_bytes: int, *, content_type: str, retention: str,
                      labels: Mapping[str, str], bucket: str) -> tuple[str, ArtifactMeta]:
        """Record a large artifact the client is to upload to ``bucket``. One MULTI round
        trip (the metadata and the tenant's index)."""
        art_id = str(uuid.uuid4())
        created_at, created_ms = _now()
        meta = ArtifactMeta(tenant=tenant, content_type=content_type, size_bytes=size_bytes,
                            retention=retention, labels=dict(labels), created_at=created_at,
                            storage=STORAGE_S3, bucket=bucket,
                            object_key=object_key(retention, art_id))
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.set(meta_key(art_id), meta.to_json(), ex=RETENTION_TTL_S[retention])
            artifact_index.add(pipe, tenant, art_id, created_ms, LONGEST_RETENTION_MS)
            await pipe.execute()
        except Exception as exc:
            raise StoreError(f"write artifact: {exc}") from exc
        return pointer(art_id), meta

    async def get(self, art_id: str) -> StoredArtifact | None:
        """The artifact (content too when Redis holds it), None when unknown or expired.
        One pipelined round trip (metadata and content read together)."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.get(meta_key(art_id))
            pipe.get(content_key(art_id))
            raw_meta, content = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"read artifact: {exc}") from exc
        meta = ArtifactMeta.from_json(raw_meta) if raw_meta is not None else None
        if meta is None:
            return None
        if meta.storage == STORAGE_REDIS:
            if content is None:
                return None
            return StoredArtifact(meta, bytes(content))
        return StoredArtifact(meta, None)

    async def page(self, tenant: str, after: Position | None, count: int) -> ArtifactPage:
        """Up to ``count`` of the tenant's artifacts after ``after``, newest first, with
        their metadata. Two round trips: the ids (one ZREVRANGEBYSCORE of at most
        ``after.ties + count + 1``), then one MGET of at most ``count`` metadata keys.
        An entry whose metadata is gone (expired) is skipped, so a page may be short of
        ``count`` while more follow; such entries are then dropped from the index, in a
        third round trip (a ZREM) taken only when the page met one."""
        found, more = await artifact_index.newest(self._redis, tenant, after, count)
        if not found:
            return ArtifactPage([], None)
        try:
            raws = await self._redis.mget([meta_key(p.member) for p in found])
        except Exception as exc:
            raise StoreError(f"read artifacts: {exc}") from exc
        items: list[ListedArtifact] = []
        gone: list[str] = []
        for position, raw in zip(found, raws, strict=True):
            meta = ArtifactMeta.from_json(raw) if raw is not None else None
            if meta is None or not meta.readable_by(tenant):
                gone.append(position.member)
            else:
                items.append(ListedArtifact(position.member, meta, position))
        with suppress(StoreError):  # harmless: the next page that meets them drops them
            await artifact_index.forget(self._redis, tenant, gone)
        return ArtifactPage(items, found[-1] if more else None)
