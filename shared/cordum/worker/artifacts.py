"""How the reference worker reads an artifact a job's context names by its pointer.

A job's context may carry ``artifact_ptr`` (``redis://art:<id>``). The worker reads the
artifact as the job's tenant only (another tenant's answers as a missing one): from
Redis when it is held inline (one pipelined round trip), else from the S3 object its
metadata records (one GET, at most :data:`MAX_READ_BYTES`, off the event loop).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from cordum.store import artifact_objects
from cordum.store.artifacts import STORAGE_S3, ArtifactStore, artifact_id, pointer

MAX_READ_BYTES = 64 * 1024 * 1024
"""The largest artifact the worker reads (an S3-held one may be larger: it fails)."""
MAX_ECHO_BYTES = 256 * 1024
"""An artifact up to this size is echoed whole (base64); a larger one by its digest."""


class ArtifactUnreadable(Exception):
    """The artifact cannot be read; ``retryable`` when S3 or Redis may come back."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ArtifactContent:
    ptr: str
    content_type: str
    data: bytes

    def echo(self) -> dict[str, Any]:
        """What the echo result says of it: type, size, sha256, and the content when small."""
        out: dict[str, Any] = {"artifact_ptr": self.ptr, "content_type": self.content_type,
                               "size_bytes": len(self.data),
                               "sha256": hashlib.sha256(self.data).hexdigest()}
        if len(self.data) <= MAX_ECHO_BYTES:
            out["content_base64"] = base64.b64encode(self.data).decode("ascii")
        return out


async def read_artifact(redis: Any, ref: str, tenant: str, *,
                        s3_client: Any = None) -> ArtifactContent:
    """The artifact ``ref`` names, read for a job of ``tenant``."""
    art_id = artifact_id(ref)
    if art_id is None:
        raise ArtifactUnreadable(f"{ref!r} is not an artifact pointer", retryable=False)
    try:
        found = await ArtifactStore(redis).get(art_id)
    except Exception as exc:
        raise ArtifactUnreadable(f"reading artifact {art_id}: {exc}", retryable=True) from exc
    if found is None or not found.meta.readable_by(tenant):
        raise ArtifactUnreadable(f"artifact {pointer(art_id)} not found", retryable=False)
    meta = found.meta
    if meta.storage != STORAGE_S3:
        return ArtifactContent(pointer(art_id), meta.content_type, found.content or b"")
    if meta.size_bytes > MAX_READ_BYTES:
        raise ArtifactUnreadable(f"artifact {pointer(art_id)} is larger than {MAX_READ_BYTES} "
                                 "bytes", retryable=False)
    try:
        data = await asyncio.to_thread(artifact_objects.read_object, meta.bucket,
                                       meta.object_key, MAX_READ_BYTES, client=s3_client)
    except artifact_objects.ObjectReadError as exc:
        raise ArtifactUnreadable(str(exc), retryable=True) from exc
    return ArtifactContent(pointer(art_id), meta.content_type, data)
