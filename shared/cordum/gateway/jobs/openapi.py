"""The job operations of the gateway's OpenAPI document: submit, list, read, cancel,
decisions (Cordum's operation ids and documented statuses)."""

from __future__ import annotations

from cordum.gateway.core import schemas
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.jobs import schemas as job_schemas
from cordum.gateway.jobs.models import SubmitJobRequest
from cordum.gateway.jobs.remediation import RemediateJobRequest

LIST_JOB_FILTERS = ("state", "topic", "tenant", "team", "trace_id", "updated_after",
                    "updated_before")
"""Cordum's spec lists state, topic and tenant; Cordum's gateway also filters on the rest."""

PART = ApiPart(
    operations=(
        Operation("post", "/api/v1/jobs", "submitJob", "Submit a job", "Jobs",
                  schemas.SubmitJobResponse, body=SubmitJobRequest, idempotency=True,
                  errors=(400, 409, 413, *AUTHENTICATED),
                  notes={403: codes(("MEMORY_POLICY_VIOLATION", "tenant_access_denied")),
                         409: codes(("IDEMPOTENCY_CONFLICT",)),
                         429: codes(("BACKPRESSURE",))}),
        Operation("get", "/api/v1/jobs", "listJobs", "List jobs, newest first", "Jobs",
                  job_schemas.JobList, query=("Limit", "Cursor", *LIST_JOB_FILTERS),
                  errors=(400, *AUTHENTICATED)),
        Operation("get", "/api/v1/jobs/{id}", "getJob", "Get a job", "Jobs",
                  job_schemas.JobDetail, errors=(400, 404, *AUTHENTICATED)),
        Operation("post", "/api/v1/jobs/{id}/cancel", "cancelJob", "Cancel a job", "Jobs",
                  job_schemas.CancelJobResponse, errors=(400, 404, 409, *AUTHENTICATED)),
        Operation("post", "/api/v1/jobs/{id}/remediate", "remediateJob",
                  "Apply a remediation the policy offered, as a new job", "Jobs",
                  schemas.SubmitJobResponse, body=RemediateJobRequest, idempotency=True,
                  errors=(400, 404, 409, 413, *AUTHENTICATED),
                  notes={403: codes(("safety_denied",)),
                         404: codes(("remediation_not_found",)),
                         409: codes(("no_remediations", "job_input_expired",
                                     "IDEMPOTENCY_CONFLICT"))}),
        Operation("get", "/api/v1/jobs/{id}/decisions", "getJobDecisions",
                  "A job's safety decisions", "Jobs", list[job_schemas.SafetyDecision],
                  errors=(400, 404, *AUTHENTICATED)),
        Operation("get", "/api/v1/traces/{id}", "getTrace",
                  "The tenant's jobs of one trace, newest first (at most 200)", "Jobs",
                  list[job_schemas.JobDetail], errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("trace_not_found",))}),
    ),
    tags=(("Jobs", "Submit, read and cancel jobs."),),
)
