"""Response bodies of the artifact and memory routes (the conventions of
``cordum.gateway.core.schemas`` hold here too): cordum-sdk's ``CreateArtifactResponse``,
``ArtifactDetail`` and the memory read's free-form object, with this gateway's extras,
and the tenant's list of artifacts (metadata only)."""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, Field

from cordum.gateway.core.models import no_default
from cordum.gateway.core.schemas import Body, PaginatedResponse, optional


class CreateArtifactResponse(Body):
    artifact_ptr: str = optional()
    """``redis://art:<id>``."""
    size_bytes: int = optional()
    content_type: str = optional()
    retention: str = optional()
    """short, standard or audit."""
    storage: str = optional()
    """redis (inline) or s3 (uploaded)."""
    expires_at: AwareDatetime = optional()
    """When the artifact expires (its retention class's TTL from now)."""


class UploadTarget(Body):
    """A presigned S3 PUT: send the content as the body, with exactly these headers."""

    url: str = optional()
    method: str = optional()
    headers: dict[str, str] = optional()
    """Content-Type and Content-Length: both are signed, another value is refused."""
    expires_at: AwareDatetime = optional()


class ArtifactUploadResponse(CreateArtifactResponse):
    upload: UploadTarget = optional()


class ArtifactMetadata(Body):
    content_type: str = optional()
    size_bytes: int = optional()
    created_at: AwareDatetime = optional()
    retention: str = optional()
    labels: dict[str, str] = optional()
    storage: str = optional()


class ArtifactDetail(Body):
    artifact_ptr: str = optional()
    content_base64: str = optional()
    """The content, for an artifact Redis holds (absent for an S3-held one)."""
    metadata: ArtifactMetadata = optional()
    download_url: str = optional()
    """A presigned GET of an S3-held artifact (absent for one Redis holds)."""
    download_expires_at: AwareDatetime = optional()


class ArtifactListItem(Body):
    """One artifact of the list: what is known of it, never its content."""

    artifact_ptr: str = optional()
    """``redis://art:<id>``."""
    id: str = optional()
    content_type: str = optional()
    size_bytes: int = optional()
    retention: str = optional()
    """short, standard or audit."""
    storage: str = optional()
    """redis (inline) or s3 (uploaded)."""
    created_at: AwareDatetime = optional()
    expires_at: AwareDatetime = optional()
    """Its creation time plus its retention class's TTL."""
    labels: dict[str, str] = optional()


class ArtifactList(PaginatedResponse):
    """The caller's tenant's artifacts, newest first. A page may hold fewer than
    ``limit`` items while ``next_cursor`` is set (artifacts that expired are skipped,
    and a page stops before 2 MiB of items)."""

    items: list[ArtifactListItem] = optional()


class MemoryRead(Body):
    """What a ``redis://`` pointer holds (Cordum's memory read)."""

    pointer: str = optional()
    key: str = optional()
    """The key read (after a REDACT, the redacted copy's)."""
    kind: str = optional()
    """context, result or artifact."""
    size_bytes: int = optional()
    base64: str = optional()
    """The data, base64 (absent for an S3-held artifact)."""
    text: str = optional()
    """The data as text, when it is UTF-8 and at most 512 KiB."""
    json_value: Any = Field(default=None, alias="json", json_schema_extra=no_default)
    """``json``: the data parsed, when it is JSON and at most 512 KiB."""
    redacted: bool = optional()
    """True when the result served is the output policy's redacted copy."""
    content_type: str = optional()
    retention: str = optional()
    storage: str = optional()
    download_url: str = optional()
    download_expires_at: AwareDatetime = optional()
