"""The OpenAPI part of GET /api/v1/me (:mod:`cordum.gateway.capabilities.routes`)."""

from __future__ import annotations

from cordum.gateway.core.openapi import ApiPart, Operation
from cordum.gateway.core.schemas import Body, optional

TAG = "Session"


class Verdict(Body):
    """Whether the caller's key may take one act; the reason and code when it may not."""

    allowed: bool = optional()
    reason: str = optional()
    """Why not, in words a person can act on (absent when allowed)."""
    code: str = optional()
    """The code the act's route would answer with (absent when allowed)."""


class Me(Body):
    """The caller and what its key may do."""

    principal_id: str = optional()
    tenant: str = optional()
    """The tenant the caller acts for (its key's, or the one it named)."""
    role: str = optional()
    actions: dict[str, Verdict] = optional()
    """Each act by name: jobs.submit, approvals.decide, dlq.manage, workers.read,
    policy.read, policy.simulate, policy.change, audit.read, audit.hold, config.read,
    config.write, schemas.write, artifacts.write, locks.write."""


PART = ApiPart(
    operations=(
        Operation("get", "/api/v1/me", "getMe",
                  "The caller and which acts its key may take, with the reason when not "
                  "(the same checks the routes run)", TAG, Me),
    ),
    tags=((TAG, "Who the caller is and what its key may do."),),
)
