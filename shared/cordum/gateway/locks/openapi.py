"""The locks operations of the gateway's OpenAPI document: read, acquire, renew and
release a named lock, and the admin list of the tenant's locks."""

from __future__ import annotations

from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.locks import models
from cordum.gateway.locks import schemas as s

TAG = "Locks"
BODY_CODES = codes(("invalid_request", "invalid_json"))
FORBIDDEN = codes(("forbidden", "tenant_access_denied", "lock_owner_mismatch"))
WRITE_ERRORS = (400, 413, *AUTHENTICATED)
STORE = codes(("store_unavailable",))

PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/locks", "getLock",
                  "Get lock status for a resource (its live owners)", TAG, s.Lock,
                  query=("resource",), errors=(400, 404, *AUTHENTICATED),
                  notes={400: codes(("invalid_request",)), 404: codes(("lock_not_found",)),
                         503: STORE}),
        Operation("post", "/api/v1/locks/acquire", "acquireLock",
                  "Acquire a distributed lock (admin or locks.write); answers a new "
                  "fencing_token", TAG, s.Lock, body=models.LockRequest,
                  errors=(409, *WRITE_ERRORS),
                  notes={400: BODY_CODES, 403: FORBIDDEN,
                         409: codes(("lock_unavailable", "too_many_owners",
                                     "too_many_locks")) +
                         "; lock_unavailable carries Retry-After and retry_after_ms",
                         503: STORE}),
        Operation("post", "/api/v1/locks/release", "releaseLock",
                  "Release a distributed lock (admin or locks.write; the principal that "
                  "took it)", TAG, s.ReleaseLockResponse, body=models.LockRequest,
                  errors=(409, *WRITE_ERRORS),
                  notes={400: BODY_CODES, 403: FORBIDDEN, 409: codes(("lock_not_held",)),
                         503: STORE}),
        Operation("post", "/api/v1/locks/renew", "renewLock",
                  "Renew a distributed lock TTL (admin or locks.write; the principal that "
                  "took it)", TAG, s.Lock, body=models.LockRequest,
                  errors=(404, *WRITE_ERRORS),
                  notes={400: BODY_CODES, 403: FORBIDDEN, 404: codes(("lock_not_held",)),
                         503: STORE}),
        Operation("get", "/api/v1/admin/locks", "listAdminLocks",
                  "List the tenant's active named locks (admin)", TAG, s.AdminLockList,
                  notes={403: codes(("forbidden", "tenant_access_denied")), 503: STORE}),
    ),
    tags=((TAG, "Named locks that agents take on a resource of their tenant: exclusive "
                "or shared, with a TTL, renewed and released by the principal that took "
                "them, each acquire answering a fencing token."),),
)
