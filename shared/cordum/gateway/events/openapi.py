"""The stream's two operations in the OpenAPI document (served by cordum-stream, at
CORDUM_STREAM_URL locally and the stack's StreamUrl output on AWS)."""

from __future__ import annotations

from cordum.gateway.core.openapi import ApiPart, Operation

STREAM_SERVER = (
    "Served by cordum-stream, not the REST API: locally at CORDUM_STREAM_URL "
    "(`make up` prints it), on AWS at the stack's StreamUrl output."
)
PROTOCOL = (
    "A WebSocket upgrade (Sec-WebSocket-Protocol `cordum-api-key, <base64url key>`, the "
    "server answers `cordum-api-key`; each text frame one protojson BusPacket with "
    "Cordum's field names, or with `envelope=1` `{id, type, data}`), or, with "
    "`Accept: text/event-stream`, Server-Sent Events (`id`, `event` = the type, `data` "
    "= the frame; a `: ping` comment every 30 s; resume with Last-Event-ID). Types: "
    "job.submit, job.result, job.progress, job.cancel, job.dlq, audit.output_policy, "
    "workflow.run (`{type, runId, workflowId, tenantId, status, events}`), "
    "worker.heartbeat and system.alert (admin keys), stream.truncated. A result frame "
    "carries a pointer only when the jobs API would serve that result."
)
FILTERS = ("types", "topic", "job_id", "run_id", "since", "envelope", "tenant_id")

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/stream", "streamEvents",
                  "Live events of the caller's tenant", "Events", str,
                  ok_media="text/event-stream", errors=(400, 401, 403, 406, 429, 503),
                  query=FILTERS, elsewhere=f"{STREAM_SERVER} {PROTOCOL}"),
        Operation("get", "/api/v1/jobs/{id}/stream", "streamJobEvents",
                  "One job's events: its state first, closed after its end", "Events", str,
                  ok_media="text/event-stream", errors=(401, 403, 404, 406, 429, 503),
                  query=("envelope", "tenant_id"),
                  elsewhere=f"{STREAM_SERVER} The first event is `job.state` (the job as "
                            "GET /api/v1/jobs/{id} answers); the server closes the stream "
                            "after the job's terminal result. " + PROTOCOL),
    ),
    tags=(("Events", "The live event stream (cordum-stream)."),),
)
