"""The audit operations of the gateway's OpenAPI document: the chain's events, its
verification and its legal hold."""

from __future__ import annotations

from cordum.gateway.audit import models
from cordum.gateway.audit import schemas as s
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes

TAG = "Audit"
FORBIDDEN = codes(("forbidden", "tenant_access_denied", "tenant_required"))
BODY_CODES = codes(("invalid_request", "invalid_json", "request_body_too_large",
                    "invalid_tenant"))
READ_NOTES = {400: codes(("invalid_tenant",)), 403: FORBIDDEN,
              503: codes(("store_unavailable",))}

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/audit/events", "listAuditEvents",
                  "The tenant's audit chain, newest first (the read is itself audited)", TAG,
                  s.AuditEventPage,
                  query=("Limit", "Cursor", "type", "severity", "actor", "job_id", "run_id",
                         "from", "to", "search"),
                  errors=(400, *AUTHENTICATED),
                  notes={**READ_NOTES, 400: codes(("INVALID_LIMIT", "INVALID_CURSOR",
                                                   "INVALID_FROM", "INVALID_TO",
                                                   "INVALID_RANGE", "INVALID_SEVERITY",
                                                   "INVALID_FILTER", "invalid_tenant"))}),
        Operation("get", "/api/v1/audit/verify", "verifyAuditChain",
                  "Verify the tenant's audit chain (the check is itself audited)", TAG,
                  s.AuditVerifyResult, errors=(400, *AUTHENTICATED), notes=READ_NOTES),
        Operation("get", "/api/v1/audit/hold", "getAuditHold",
                  "The tenant's legal hold", TAG, s.AuditHold, errors=(400, *AUTHENTICATED),
                  notes=READ_NOTES),
        Operation("put", "/api/v1/audit/hold", "setAuditHold",
                  "Put the tenant's audit chain under a legal hold (admin)", TAG, s.AuditHold,
                  body=models.HoldRequest, errors=(400, *AUTHENTICATED),
                  notes={**READ_NOTES, 400: BODY_CODES}),
        Operation("delete", "/api/v1/audit/hold", "clearAuditHold",
                  "Lift the tenant's legal hold (admin)", TAG, s.AuditHold,
                  errors=(400, *AUTHENTICATED), notes={**READ_NOTES, 400: BODY_CODES}),
    ),
    tags=((TAG, "The tenant's tamper-evident audit chain: its events, their verification "
                "and the legal hold that keeps them from being trimmed."),),
)
