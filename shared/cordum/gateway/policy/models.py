"""Request bodies of the policy routes: Cordum's fields, this gateway's bounds.

Unknown fields are accepted and ignored (cordum-sdk sends a few Cordum's server
refuses). Free text (author, message, note) is trimmed and cut to
:data:`FREE_TEXT_MAX_BYTES`; a bundle's content is bounded by
:data:`MAX_BUNDLE_BYTES` and checked by ``cordum.safety.bundles.validate_bundle`` in
the service, which names the line and the rule of a mistake.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from cordum.gateway.core.models import no_default

MAX_BUNDLE_BYTES = 256 * 1024
"""A bundle's YAML is at most 256 KiB of UTF-8."""
MAX_BODY_BYTES = 2 * 1024 * 1024
"""A policy request body is at most 2 MiB (400 beyond, as for a bundle that is too big)."""
FREE_TEXT_MAX_BYTES = 512
"""author, message and note are cut to this many bytes of UTF-8."""
MAX_BUNDLE_IDS = 100
"""A publish names at most this many bundles (the most the policy may hold)."""

_OPEN = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})


def free_text(value: str) -> str:
    """Trimmed, and cut to :data:`FREE_TEXT_MAX_BYTES` of UTF-8 on a character boundary."""
    return value.strip().encode()[:FREE_TEXT_MAX_BYTES].decode(errors="ignore").strip()


FreeText = Annotated[str, AfterValidator(free_text)]
"""A free text field of a body: trimmed and cut to 512 bytes (:func:`free_text`)."""


def _text(description: str) -> Any:
    return Field(default="", json_schema_extra=no_default, description=description)


class _Noted(BaseModel):
    model_config = _OPEN

    message: FreeText = _text("Why; kept on the bundles and in the audit entry (cut to 512 "
                              "bytes).")
    note: FreeText = _text("Note of the snapshots taken (cut to 512 bytes).")
    author: FreeText = _text("Ignored: the author is always the caller's key (its principal "
                             "id).")


class BundleWrite(BaseModel):
    """PUT /api/v1/policy/bundles/{id}."""

    model_config = _OPEN

    content: str = Field(description="The bundle's policy YAML (at most 256 KiB).")
    enabled: bool | None = Field(default=None, json_schema_extra=no_default,
                                 description="true puts the bundle in force at once, false "
                                             "makes it a draft; without it a new bundle is "
                                             "a draft until published and a bundle in force "
                                             "stays in force with the new content.")
    author: FreeText = _text("Ignored: the author is always the caller's key (its principal "
                             "id).")
    message: FreeText = _text("Why; cut to 512 bytes.")

    @field_validator("content")
    @classmethod
    def _bounded(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        if len(value.encode()) > MAX_BUNDLE_BYTES:
            raise ValueError(f"larger than {MAX_BUNDLE_BYTES} bytes")
        return value


class ProposalReject(BaseModel):
    """POST /api/v1/policy/proposals/{id}/reject."""

    model_config = _OPEN

    reason: FreeText = _text("Why; kept in the audit entry (cut to 512 bytes).")


class SnapshotCreate(BaseModel):
    """POST /api/v1/policy/bundles/snapshots."""

    model_config = _OPEN

    note: FreeText = _text("Cut to 512 bytes.")


class PublishRequest(_Noted):
    """POST /api/v1/policy/publish."""

    bundle_ids: list[str] = Field(default_factory=list, json_schema_extra=no_default,
                                  max_length=MAX_BUNDLE_IDS,
                                  description="Bundles to enable; all bundles when absent.")


class RollbackRequest(_Noted):
    """POST /api/v1/policy/rollback."""

    snapshot_id: str = Field(min_length=1, max_length=200,
                             description="The snapshot whose bundles are restored.")


class CheckMeta(BaseModel):
    """``meta`` of a policy question (CAP JobMetadata). ``tenant_id`` is always the
    caller's tenant."""

    model_config = _OPEN

    tenant_id: str = _text("Ignored: the caller's tenant.")
    actor_id: str = _text("The actor the job acts for.")
    actor_type: str = _text("human or service (ACTOR_TYPE_* accepted).")
    idempotency_key: str = _text("As the job would carry it.")
    capability: str = _text("The capability asked for.")
    risk_tags: list[str] = Field(default_factory=list, json_schema_extra=no_default,
                                 max_length=64)
    requires: list[str] = Field(default_factory=list, json_schema_extra=no_default,
                                max_length=64)
    pack_id: str = _text("The pack the job comes from.")
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra=no_default)


class CheckBudget(BaseModel):
    """``budget`` of a policy question (CAP Budget)."""

    model_config = _OPEN

    max_input_tokens: int = Field(default=0, ge=0, le=2**62, json_schema_extra=no_default)
    max_output_tokens: int = Field(default=0, ge=0, le=2**62, json_schema_extra=no_default)
    max_total_tokens: int = Field(default=0, ge=0, le=2**62, json_schema_extra=no_default)
    deadline_ms: int = Field(default=0, ge=0, le=2**62, json_schema_extra=no_default)


class PolicyCheck(BaseModel):
    """Body of evaluate, simulate and explain: the job as the kernel would be asked about
    it. The tenant is the caller's and the principal the caller's key, whatever the body
    says; cordum-sdk's top-level ``capability`` and ``risk_tags`` fill ``meta``'s."""

    model_config = _OPEN

    topic: str = Field(default="", json_schema_extra=no_default,
                       description="The job's topic (required).")
    job_id: str = _text("The job's id (approval_ref of a REQUIRE_HUMAN answer).")
    tenant: str = _text("Ignored: the caller's tenant.")
    org_id: str = _text("Ignored: the caller's tenant.")
    principal_id: str = _text("Ignored: the caller's key.")
    priority: str = _text("interactive (default), batch or critical.")
    estimated_cost: float = Field(default=0.0, ge=0, json_schema_extra=no_default,
                                  allow_inf_nan=False)
    budget: CheckBudget | None = Field(default=None, json_schema_extra=no_default)
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra=no_default)
    memory_id: str = _text("The job's memory id.")
    effective_config: dict[str, Any] | None = Field(default=None, json_schema_extra=no_default)
    meta: CheckMeta | None = Field(default=None, json_schema_extra=no_default)
    action: dict[str, Any] | None = Field(
        default=None, json_schema_extra=no_default,
        description="The action descriptor, passed to the kernel as label "
                    "_action.descriptor_json.")
    capability: str = _text("cordum-sdk's place for meta.capability.")
    risk_tags: list[str] = Field(default_factory=list, json_schema_extra=no_default,
                                 max_length=64)


class BundleSimulate(BaseModel):
    """POST /api/v1/policy/bundles/{id}/simulate."""

    model_config = _OPEN

    request: PolicyCheck = Field(description="The job to decide, as evaluate takes it.")
    content: str | None = Field(default=None, json_schema_extra=no_default,
                                description="The bundle's YAML to try instead of the "
                                            "stored one (at most 256 KiB).")

    @field_validator("content")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > MAX_BUNDLE_BYTES:
            raise ValueError(f"larger than {MAX_BUNDLE_BYTES} bytes")
        return value


# -- replay and analytics ---------------------------------------------------------------

MAX_REPLAY_JOBS = 1000
"""Jobs one replay call looks at, at most (``max_jobs`` is cut to it)."""
DEFAULT_REPLAY_JOBS = 500
MAX_CHANGES_PAGE = 1000
DEFAULT_CHANGES_PAGE = 100


class ReplayFilters(BaseModel):
    model_config = _OPEN

    tenant: str = _text("Only the caller's tenant, or absent: another tenant is 403.")
    topic_pattern: str = _text("A glob over the job's topic (job.bank.*).")
    original_decision: str = _text("Only jobs whose recorded decision was this one "
                                   "(ALLOW, DENY, REQUIRE_APPROVAL, THROTTLE, "
                                   "ALLOW_WITH_CONSTRAINTS; any case).")


class _Window(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True,
                              json_schema_extra={"additionalProperties": True})

    from_: str = Field(alias="from", description="RFC 3339; the window's start (inclusive).")
    to: str = Field(description="RFC 3339; the window's end (inclusive), at most 7 days "
                                "after from.")
    tenant: str = _text("Only the caller's tenant, or absent: another tenant is 403.")


class ReplayRequest(_Window):
    """POST /api/v1/policy/replay."""

    filters: ReplayFilters = Field(default_factory=ReplayFilters, json_schema_extra=no_default)
    candidate_bundle_id: str = _text("The bundle replaced (or added) by candidate_content, "
                                     "in force; alone, that stored bundle put in force.")
    candidate_content: str | None = Field(default=None, json_schema_extra=no_default,
                                          description="A bundle's YAML to replay (at most "
                                                      "256 KiB).")
    use_current_policy: bool = Field(default=False, json_schema_extra=no_default,
                                     description="Replay the policy in force.")
    max_jobs: int = Field(default=DEFAULT_REPLAY_JOBS, ge=1, json_schema_extra=no_default,
                          description="Jobs this call looks at (500; cut to 1000).")
    limit: int = Field(default=DEFAULT_CHANGES_PAGE, ge=1, json_schema_extra=no_default,
                       description="Changes this call answers at most (100; cut to 1000).")
    cursor: str = _text("next_cursor of the previous call: the scan goes on from there.")

    @field_validator("candidate_content")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > MAX_BUNDLE_BYTES:
            raise ValueError(f"larger than {MAX_BUNDLE_BYTES} bytes")
        return value

    @field_validator("max_jobs")
    @classmethod
    def _jobs(cls, value: int) -> int:
        return min(value, MAX_REPLAY_JOBS)

    @field_validator("limit")
    @classmethod
    def _page(cls, value: int) -> int:
        return min(value, MAX_CHANGES_PAGE)


class AnalyticsRequest(_Window):
    """POST /api/v1/policy/analytics."""

    rule_filter: str = _text("Only this rule id.")
