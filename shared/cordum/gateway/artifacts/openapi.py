"""The artifacts operations of the gateway's OpenAPI document: artifacts made inline or
uploaded to S3, listed, read back, and the memory read of ``redis://`` pointers."""

from __future__ import annotations

from cordum.gateway.artifacts import models
from cordum.gateway.artifacts import schemas as s
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes

TAG = "Memory"
BODY = codes(("invalid_request", "invalid_json", "invalid_base64", "content_required"))
WRITE_FORBIDDEN = codes(("forbidden", "tenant_access_denied"))
READ_NOTES = {404: codes(("not_found",)), 503: codes(("store_unavailable",))}

PART = ApiPart(
    operations=(
        Operation("post", "/api/v1/artifacts", "createArtifact",
                  "Store an artifact of up to 4 MiB inline (content_base64 or text content)",
                  TAG, s.CreateArtifactResponse, body=models.CreateArtifactRequest,
                  errors=(400, 413, *AUTHENTICATED),
                  notes={400: BODY, 403: WRITE_FORBIDDEN,
                         413: codes(("payload_too_large",)),
                         503: codes(("store_unavailable",))}),
        Operation("post", "/api/v1/artifacts/uploads", "createArtifactUpload",
                  "Declare a large artifact (up to 5 GiB): a presigned S3 PUT to upload it",
                  TAG, s.ArtifactUploadResponse, body=models.ArtifactUploadRequest,
                  errors=(400, 413, *AUTHENTICATED),
                  notes={400: codes(("invalid_request", "invalid_json",
                                     "artifact_uploads_unavailable")),
                         403: WRITE_FORBIDDEN, 413: codes(("payload_too_large",)),
                         503: codes(("store_unavailable",))}),
        Operation("get", "/api/v1/artifacts", "listArtifacts",
                  "The tenant's artifacts, newest first: metadata only, never content",
                  TAG, s.ArtifactList, query=("Limit", "Cursor"),
                  errors=(400, *AUTHENTICATED),
                  notes={400: codes(("INVALID_LIMIT", "INVALID_CURSOR")),
                         503: codes(("store_unavailable",))}),
        Operation("get", "/api/v1/artifacts/{ptr}", "getArtifact",
                  "An artifact by its id, art:<id> or percent-encoded pointer: its "
                  "metadata and content, or a download URL when S3 holds it", TAG,
                  s.ArtifactDetail, errors=(404, *AUTHENTICATED), notes=READ_NOTES),
        Operation("get", "/api/v1/artifacts/redis://{key}", "getArtifactByPointer",
                  "An artifact by its pointer as it is (the path cordum-sdk builds from "
                  "redis://art:<id>)", TAG, s.ArtifactDetail,
                  errors=(404, *AUTHENTICATED), notes=READ_NOTES),
        Operation("get", "/api/v1/memory", "getMemory",
                  "What a redis:// pointer holds: a job's context or result, or an "
                  "artifact (no other key)", TAG, s.MemoryRead, query=("ptr", "key"),
                  errors=(400, 404, *AUTHENTICATED),
                  notes={400: codes(("missing_pointer", "invalid_pointer",
                                     "unsupported_pointer")),
                         403: codes(("output_withheld", "tenant_access_denied")),
                         **READ_NOTES}),
    ),
    tags=((TAG, "Artifacts (inline in Redis, or uploaded to S3 through presigned URLs) "
                "and the memory read of a job's context, result or artifact pointer."),),
)
