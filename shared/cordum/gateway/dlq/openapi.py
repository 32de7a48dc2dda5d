"""The dead-letter operations of the gateway's OpenAPI document: the bare list Cordum's
client iterates, the paged list, delete and retry."""

from __future__ import annotations

from cordum.gateway.core import schemas
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation
from cordum.gateway.dlq import schemas as dlq_schemas

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/dlq", "listDLQ", "Dead-letter entries (bare array)", "DLQ",
                  list[dlq_schemas.DLQEntry], query=("Limit",), errors=(400, *AUTHENTICATED)),
        Operation("get", "/api/v1/dlq/page", "listDLQPaginated", "Dead-letter entries, paged",
                  "DLQ", dlq_schemas.DLQPage, query=("Limit", "Cursor"),
                  errors=(400, *AUTHENTICATED)),
        Operation("delete", "/api/v1/dlq/{job_id}", "deleteDLQEntry",
                  "Delete a dead-letter entry", "DLQ", None, ok_status=204,
                  errors=(400, 404, *AUTHENTICATED)),
        Operation("post", "/api/v1/dlq/{job_id}/retry", "retryDLQEntry",
                  "Retry a dead-letter entry as a new job", "DLQ", schemas.JobIdResponse,
                  errors=(400, 404, *AUTHENTICATED), notes={400: "missing topic for retry"}),
    ),
    tags=(("DLQ", "Dead-lettered jobs (admin only)."),),
)
