"""The system operations of the gateway's OpenAPI document: workers, status and the two
health checks (the public one answers without a credential)."""

from __future__ import annotations

from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.system import schemas

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/workers", "listWorkers", "Workers and their load", "Workers",
                  schemas.WorkerList),
        Operation("get", "/api/v1/workers/{id}", "getWorker", "One worker and its load",
                  "Workers", schemas.WorkerRuntime, errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("WORKER_NOT_FOUND",))}),
        Operation("get", "/api/v1/workers/{id}/jobs", "getWorkerJobs",
                  "The tenant's newest jobs of one worker (20 by default, at most 100)",
                  "Workers", schemas.WorkerJobs,
                  query=("Limit",), errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("WORKER_NOT_FOUND",))}),
        Operation("get", "/api/v1/status", "getStatus", "Control-plane status", "System",
                  schemas.StatusResponse),
        Operation("get", "/health", "healthCheck", "Redis and NATS answer", "System",
                  schemas.HealthResponse, errors=(503,), public=True,
                  unhealthy=schemas.HealthResponse),
        Operation("get", "/api/v1/health", "healthCheckV1",
                  "Redis and NATS answer (authenticated)", "System", schemas.HealthResponse,
                  unhealthy=schemas.HealthResponse),
    ),
    tags=(("Workers", "Worker runtime as reported by heartbeats."),
          ("System", "Status and health.")),
)
