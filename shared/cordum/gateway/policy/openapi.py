"""The policy operations of the gateway's OpenAPI document: bundles, their snapshots,
publish, rollback, audit, rules, the kernel's evaluate, simulate, explain and
snapshots, and replay and analytics of the caller's tenant's jobs."""

from __future__ import annotations

from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.policy import models
from cordum.gateway.policy import schemas as s

TAG = "Policy"
BUNDLE = "/api/v1/policy/bundles/{id}"
WRITE_FORBIDDEN = codes(("policy_write_requires_any_tenant_key", "forbidden",
                         "tenant_access_denied"))
WRITE_CONFLICTS = codes(("POLICY_VERSION_CONFLICT", "too_many_policy_proposals"))
PROPOSED = ((202, s.PolicyProposalPending,
             "Kept as a proposal: with CORDUM_POLICY_TWO_PERSON, a change of the bundles "
             "in force waits for another identity to confirm it"),)
INVALID = codes(("POLICY_VALIDATION_FAILED", "invalid_request", "invalid_json",
                 "request_body_too_large"))
READ = (400, *AUTHENTICATED)
WRITE = (400, 404, 409, *AUTHENTICATED)
ASK = (400, *AUTHENTICATED)
KERNEL = {503: codes(("kernel_unavailable",))}
JOBS_FORBIDDEN = codes(("forbidden", "tenant_access_denied", "tenant_required"))


def _write(method: str, path: str, op_id: str, summary: str, ok: object,
           body: type | None = None, ok_status: int = 200, *,
           proposable: bool = True) -> Operation:
    return Operation(method, path, op_id, summary, TAG, ok, ok_status=ok_status,
                     body=body, errors=WRITE, also=PROPOSED if proposable else (),
                     notes={400: INVALID, 403: WRITE_FORBIDDEN, 409: WRITE_CONFLICTS})


PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/policy/bundles", "listPolicyBundles",
                  "The system policy's bundles", TAG, s.PolicyBundleList, errors=READ),
        Operation("get", "/api/v1/policy/bundles/snapshots", "listPolicyBundleSnapshots",
                  "Snapshots of the bundles, newest first", TAG, s.PolicySnapshotList,
                  errors=READ),
        _write("post", "/api/v1/policy/bundles/snapshots", "createPolicyBundleSnapshot",
               "Snapshot the bundles", s.PolicySnapshot, models.SnapshotCreate,
               proposable=False),
        Operation("get", "/api/v1/policy/bundles/snapshots/{snapshot_id}",
                  "getPolicyBundleSnapshot", "One snapshot of the bundles", TAG,
                  s.PolicySnapshot, errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("snapshot_not_found",))}),
        Operation("get", BUNDLE, "getPolicyBundle", "One bundle (~ in the id stands for /)",
                  TAG, s.PolicyBundle, query=("bundle_id",), errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("bundle_not_found",))}),
        Operation("put", BUNDLE, "putPolicyBundle",
                  "Write a bundle (a draft unless enabled is true)", TAG,
                  s.PolicyBundleWritten, query=("bundle_id",), body=models.BundleWrite,
                  errors=WRITE, also=PROPOSED,
                  notes={400: INVALID + ", invalid_bundle_id", 403: WRITE_FORBIDDEN,
                         409: codes(("POLICY_VERSION_CONFLICT", "too_many_policy_bundles"))}),
        Operation("delete", BUNDLE, "deletePolicyBundle", "Delete a bundle", TAG, None,
                  ok_status=204, query=("bundle_id",), errors=WRITE, also=PROPOSED,
                  notes={403: WRITE_FORBIDDEN, 404: codes(("bundle_not_found",)),
                         409: WRITE_CONFLICTS}),
        Operation("post", BUNDLE + "/simulate", "simulatePolicyBundle",
                  "Decide a job under the bundles with this one replaced", TAG,
                  s.PolicyDecision, query=("bundle_id",), body=models.BundleSimulate,
                  errors=(400, 404, *AUTHENTICATED),
                  notes={400: INVALID + ", topic_is_required",
                         404: codes(("bundle_not_found",)),
                         503: codes(("base_policy_unavailable",))}),
        _write("post", "/api/v1/policy/publish", "publishPolicy",
               "Put bundles in force, with snapshots before and after",
               s.PolicyPublishResult, models.PublishRequest),
        _write("post", "/api/v1/policy/rollback", "rollbackPolicy",
               "Restore the bundles of a snapshot", s.PolicyRollbackResult,
               models.RollbackRequest),
        Operation("get", "/api/v1/policy/proposals", "listPolicyProposals",
                  "Changes waiting for a second person's confirmation", TAG,
                  s.PolicyProposalList, errors=READ),
        Operation("get", "/api/v1/policy/proposals/{proposal_id}", "getPolicyProposal",
                  "One change waiting for confirmation", TAG, s.PolicyProposal,
                  errors=(400, 404, *AUTHENTICATED),
                  notes={404: codes(("proposal_not_found",))}),
        Operation("post", "/api/v1/policy/proposals/{proposal_id}/confirm",
                  "confirmPolicyProposal",
                  "Put a proposed change in force (another identity than its author)", TAG,
                  s.PolicyProposalConfirmed, errors=WRITE,
                  notes={400: INVALID, 403: WRITE_FORBIDDEN + ", self_confirmation_denied",
                         404: codes(("proposal_not_found", "bundle_not_found",
                                     "snapshot_not_found")),
                         409: codes(("POLICY_VERSION_CONFLICT", "POLICY_PROPOSAL_STALE"))}),
        Operation("post", "/api/v1/policy/proposals/{proposal_id}/reject",
                  "rejectPolicyProposal", "Drop a proposed change (its author may withdraw it)",
                  TAG, s.PolicyProposalRejected, body=models.ProposalReject, errors=WRITE,
                  notes={403: WRITE_FORBIDDEN, 404: codes(("proposal_not_found",)),
                         409: WRITE_CONFLICTS}),
        Operation("get", "/api/v1/policy/audit", "getPolicyAudit",
                  "Changes to the policy, newest first (X-Total-Count, X-Has-More, X-Offset "
                  "headers)", TAG, list[s.PolicyAuditEntry],
                  query=("limit", "offset", "action", "rule_id", "type", "search"),
                  errors=READ),
        Operation("get", "/api/v1/policy/rules", "listPolicyRules",
                  "The rules of the bundles", TAG, s.PolicyRuleList,
                  query=("include_disabled",), errors=READ),
        Operation("post", "/api/v1/policy/evaluate", "evaluatePolicy",
                  "Ask the kernel to decide a job (counts velocity)", TAG, s.PolicyDecision,
                  body=models.PolicyCheck, errors=ASK, notes=KERNEL),
        Operation("post", "/api/v1/policy/simulate", "simulatePolicy",
                  "Ask the kernel what it would decide (counts nothing)", TAG,
                  s.PolicyDecision, body=models.PolicyCheck, errors=ASK, notes=KERNEL),
        Operation("post", "/api/v1/policy/explain", "explainPolicy",
                  "Ask the kernel why it would decide so", TAG, s.PolicyDecision,
                  body=models.PolicyCheck, errors=ASK, notes=KERNEL),
        Operation("get", "/api/v1/policy/snapshots", "listPolicySnapshots",
                  "The kernel's policy snapshots, the one in force first", TAG,
                  list[s.PolicyKernelSnapshot],
                  errors=AUTHENTICATED, notes=KERNEL),
        Operation("post", "/api/v1/policy/replay", "replayPolicy",
                  "Decide the tenant's recorded jobs again under a policy", TAG,
                  s.PolicyReplayResult, body=models.ReplayRequest,
                  errors=(400, 404, *AUTHENTICATED),
                  notes={400: INVALID + ", invalid_request", 403: JOBS_FORBIDDEN,
                         404: codes(("bundle_not_found",)),
                         503: codes(("base_policy_unavailable",))}),
        Operation("post", "/api/v1/policy/analytics", "policyAnalytics",
                  "Hits, approvals and approval latency of each rule over the tenant's jobs",
                  TAG, s.PolicyAnalyticsResult, body=models.AnalyticsRequest,
                  errors=READ,
                  notes={400: codes(("invalid_analytics_window", "invalid_request",
                                     "invalid_json")), 403: JOBS_FORBIDDEN}),
    ),
    tags=((TAG, "The system policy's bundles and their governance (changes need a key "
                "for every tenant), and questions to the safety kernel."),),
)
