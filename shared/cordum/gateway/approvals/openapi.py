"""The approval operations of the gateway's OpenAPI document: the list, approve, reject
and a job's approval context (Cordum's operation ids and the machine codes they answer)."""

from __future__ import annotations

from cordum.gateway.approvals import schemas as approval_schemas
from cordum.gateway.approvals.models import ApprovalDecisionRequest
from cordum.gateway.core import schemas
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes

APPROVAL_CONFLICTS = ("approval_already_resolved", "approval_retryable_lock",
                      "approval_terminal_run", "approval_not_actionable")
APPROVE_CONFLICTS = APPROVAL_CONFLICTS + ("approval_stale_snapshot", "approval_stale_request")
APPROVAL_ERRORS = (400, 404, 409, *AUTHENTICATED)
APPROVAL_FORBIDDEN = "self_approval_denied, RESULT_INVALID_STATUS, tenant_access_denied, forbidden"

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/approvals", "listApprovals", "Jobs waiting for approval",
                  "Approvals", approval_schemas.ApprovalList, query=("Limit", "Cursor"),
                  errors=(400, *AUTHENTICATED)),
        Operation("post", "/api/v1/approvals/{job_id}/approve", "approveJob", "Approve a job",
                  "Approvals", schemas.SubmitJobResponse, body=ApprovalDecisionRequest,
                  errors=APPROVAL_ERRORS,
                  notes={403: codes((APPROVAL_FORBIDDEN,)),
                         404: codes(("RESULT_INVALID_STATUS",)),
                         409: codes(APPROVE_CONFLICTS)}),
        Operation("post", "/api/v1/approvals/{job_id}/reject", "rejectJob", "Reject a job",
                  "Approvals", schemas.JobIdResponse, body=ApprovalDecisionRequest,
                  errors=APPROVAL_ERRORS,
                  notes={403: codes((APPROVAL_FORBIDDEN,)),
                         404: codes(("RESULT_INVALID_STATUS",)),
                         409: codes(APPROVAL_CONFLICTS)}),
        Operation("get", "/api/v1/approvals/{job_id}/context", "getApprovalContext",
                  "What an approver needs to decide about a job", "Approvals",
                  approval_schemas.ApprovalContext, errors=(404, *AUTHENTICATED)),
    ),
    tags=(("Approvals", "Human approval of jobs held by policy (admin only)."),),
)
