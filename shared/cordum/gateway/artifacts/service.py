"""Artifacts made and read, and memory pointers read, for one caller.

Costs: making an inline artifact is one Redis transaction (the content, the metadata
and the tenant's index); an upload is one Redis transaction and a local signature (no
S3 call); a page of the list is two Redis round trips (a range of the tenant's index,
an MGET of at most ``limit`` metadata keys) and a third when some had expired (their
index entries dropped); reading an artifact is one pipelined Redis round trip (plus a
local signature for an S3-held one); a memory read of a job's context or result is two
(the job's meta and output decision, then the data), of an artifact one. No answer
holds more than 4 MiB of content (base64: 5.6 MB), ``text``/``json`` are only added to
a memory read of at most :data:`MAX_DECODED_BYTES`, and a page of the list stops before
:data:`MAX_PAGE_BYTES` of items, so every answer fits the 6 MB a Lambda function may
answer.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import Forbidden, InvalidRequest, NotFound
from cordum.gateway.core.http import json_too_deep
from cordum.store import artifact_objects
from cordum.store.artifacts import (
    KEY_PREFIX,
    RETENTION_TTL_S,
    STORAGE_S3,
    ArtifactMeta,
    ArtifactStore,
    ListedArtifact,
    StoredArtifact,
    artifact_id,
    pointer,
)
from cordum.store.memory_reads import MemoryReads, job_pointer

if TYPE_CHECKING:
    from cordum.gateway.artifacts.models import ArtifactUploadRequest, CreateArtifactRequest
    from cordum.gateway.core.auth import Principal
    from cordum.store.artifact_index import Position

MAX_DECODED_BYTES = 512 * 1024
"""A memory read adds ``text`` and ``json`` only for data up to this size: escaped, each
may take three times the bytes of the data."""
KIND_ARTIFACT = "artifact"
MAX_PAGE_BYTES = 2 * 1024 * 1024
"""A page of the list stops before its items' JSON passes this, with a cursor: an item
may carry 32 labels of 256 characters each, so 200 of them could pass 6 MB. Escaping the
body again in the proxy answer at most doubles it: 2 MiB stays under 4 MiB."""


def _expires(retention: str) -> str:
    when = datetime.now(UTC) + timedelta(seconds=RETENTION_TTL_S[retention])
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _at_ms(epoch_ms: int) -> str:
    when = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _listed(art: ListedArtifact) -> dict[str, Any]:
    """A list item: the metadata a reader is shown, its id and pointer, and its expiry
    (its creation, the index's score, plus its retention class's TTL)."""
    meta, created_ms = art.meta, art.position.score
    ttl_ms = RETENTION_TTL_S.get(meta.retention, 0) * 1000
    return {"artifact_ptr": pointer(art.art_id), "id": art.art_id,
            "content_type": meta.content_type, "size_bytes": meta.size_bytes,
            "retention": meta.retention, "storage": meta.storage,
            "created_at": meta.created_at or _at_ms(created_ms),
            "expires_at": _at_ms(created_ms + ttl_ms), "labels": dict(meta.labels)}


def _not_found(what: str = "artifact") -> NotFound:
    return NotFound(f"{what} not found", "not_found")


def data_fields(data: bytes) -> dict[str, Any]:
    """size_bytes and base64 of ``data``; text and json when small enough and valid."""
    out: dict[str, Any] = {"size_bytes": len(data),
                           "base64": base64.b64encode(data).decode("ascii")}
    if len(data) > MAX_DECODED_BYTES:
        return out
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return out
    out["text"] = text
    if not json_too_deep(text):
        try:
            out["json"] = json.loads(text)
        except (ValueError, RecursionError):
            pass
    return out


class ArtifactService:
    def __init__(self, redis: Any, *, bucket: str, output_policy: bool,
                 signer: Any = None) -> None:
        self._artifacts = ArtifactStore(redis)
        self._memory = MemoryReads(redis)
        self._bucket = bucket
        self._output_policy = output_policy
        self._signer = signer
        """The S3 client that signs URLs (None: the process's own)."""

    async def create(self, who: Principal, body: CreateArtifactRequest,
                     labels: dict[str, str]) -> dict[str, Any]:
        data = body.data()
        ptr, meta = await self._artifacts.put(who.tenant, data, content_type=body.content_type,
                                              retention=body.retention, labels=labels)
        return {"artifact_ptr": ptr, "size_bytes": meta.size_bytes,
                "content_type": meta.content_type, "retention": meta.retention,
                "storage": meta.storage, "expires_at": _expires(meta.retention)}

    async def reserve(self, who: Principal, body: ArtifactUploadRequest,
                      labels: dict[str, str]) -> dict[str, Any]:
        size = body.checked_size()
        if not self._bucket:
            raise InvalidRequest(
                "large artifacts are not enabled here (CORDUM_ARTIFACT_BUCKET is not set): "
                "send the content inline, up to 4 MiB", "artifact_uploads_unavailable")
        ptr, meta = await self._artifacts.reserve(
            who.tenant, size, content_type=body.content_type, retention=body.retention,
            labels=labels, bucket=self._bucket)
        upload = artifact_objects.presign_upload(meta.bucket, meta.object_key,
                                                 content_type=meta.content_type,
                                                 size_bytes=size, client=self._signer)
        return {"artifact_ptr": ptr, "size_bytes": size, "content_type": meta.content_type,
                "retention": meta.retention, "storage": meta.storage,
                "expires_at": _expires(meta.retention), "upload": upload}

    async def page(self, who: Principal, limit: int, after: Position | None
                   ) -> dict[str, Any]:
        """A page of the caller's tenant's artifacts, newest first, metadata only: at
        most ``limit`` items and :data:`MAX_PAGE_BYTES` of them; ``next_cursor`` null
        once the list is done. Only the tenant's own index is read, so no other tenant's
        artifact can be listed."""
        page = await self._artifacts.page(who.tenant, after, limit)
        items: list[dict[str, Any]] = []
        used = 0
        for art in page.items:
            item = _listed(art)
            size = len(json.dumps(item, separators=(",", ":")))
            if items and used + size > MAX_PAGE_BYTES:
                last = page.items[len(items) - 1].position
                return {"items": items, "next_cursor": last.encode()}
            items.append(item)
            used += size
        return {"items": items, "next_cursor": page.end.encode() if page.end else None}

    async def _readable(self, who: Principal, ref: str) -> tuple[str, StoredArtifact]:
        art_id = artifact_id(ref)
        if art_id is None:
            raise _not_found()
        found = await self._artifacts.get(art_id)
        if found is None or not found.meta.readable_by(who.tenant):
            raise _not_found()
        return art_id, found

    def _download(self, meta: ArtifactMeta) -> dict[str, str]:
        link = artifact_objects.presign_download(meta.bucket, meta.object_key,
                                                 client=self._signer)
        return {"download_url": link["url"], "download_expires_at": link["expires_at"]}

    async def detail(self, who: Principal, ref: str) -> dict[str, Any]:
        """cordum-sdk's ArtifactDetail: the content of a Redis-held artifact, a download
        URL for an S3-held one. Another tenant's artifact is 404 as a missing one."""
        art_id, found = await self._readable(who, ref)
        out: dict[str, Any] = {"artifact_ptr": f"redis://{KEY_PREFIX}{art_id}",
                               "metadata": found.meta.public()}
        if found.meta.storage == STORAGE_S3:
            out.update(self._download(found.meta))
        else:
            out["content_base64"] = base64.b64encode(found.content or b"").decode("ascii")
        return out

    async def memory(self, who: Principal, pointer: str, key: str) -> dict[str, Any]:
        """What ``key`` holds: a job's context or result, or an artifact. Any other key is
        400 ``unsupported_pointer``; another tenant's is 404 as a missing one; a job whose
        data the output policy withholds is 403 ``output_withheld``."""
        head = {"pointer": pointer, "key": key}
        if key.startswith(KEY_PREFIX):
            if artifact_id(key) is None:
                raise InvalidRequest("unsupported pointer key (only ctx:*, res:* or art:*)",
                                     "unsupported_pointer")
            _, found = await self._readable(who, key)
            meta = found.meta
            art: dict[str, Any] = {**head, "kind": KIND_ARTIFACT,
                                   "content_type": meta.content_type,
                                   "retention": meta.retention, "storage": meta.storage}
            if meta.storage == STORAGE_S3:
                return {**art, "size_bytes": meta.size_bytes, **self._download(meta)}
            return {**art, **data_fields(found.content or b"")}
        ptr = job_pointer(key)
        if ptr is None:
            raise InvalidRequest("unsupported pointer key (only ctx:*, res:* or art:*)",
                                 "unsupported_pointer")
        read = await self._memory.read(ptr, who.tenant, output_policy=self._output_policy)
        if read.withheld is not None:
            raise Forbidden(f"not shown: {read.withheld}", "output_withheld")
        if read.missing or read.data is None:
            raise _not_found("pointer")
        out: dict[str, Any] = {"pointer": f"redis://{read.key}", "key": read.key,
                               "kind": ptr.kind, **data_fields(read.data)}
        if read.redacted:
            out["redacted"] = True
        return out
