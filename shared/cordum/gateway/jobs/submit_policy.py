"""The submit-time policy check: the safety kernel is asked before a job is announced.

Cordum's gateway asks the kernel when a job is submitted, so a caller learns at
once that a job is denied (403), throttled (429) or waits for a human (200
``approval_required``); the scheduler asks again at dispatch, so nothing that
skipped this check (a direct bus publish, a check switched off) runs unchecked.

Outcomes, and what the job service makes of them:

- ALLOW / ALLOW_WITH_CONSTRAINTS: stored PENDING and published; the scheduler
  re-checks and records the decision at dispatch.
- DENY: stored DENIED with its DLQ entry (``safety_denied``), 403.
- THROTTLE: nothing stored, 429 with ``Retry-After: 30``.
- REQUIRE_APPROVAL (or ALLOW* with ``approval_required``): stored
  APPROVAL_REQUIRED with the safety record the engine writes, not published.
- UNAVAILABLE (kernel unreachable, breaker open, no address): the input fail
  mode decides. closed: 503 ``policy_unavailable``, nothing stored; open: the
  job goes on as allowed, labelled ``safety_bypassed`` as the engine labels it.

CORDUM_SUBMIT_POLICY_CHECK (on by default) switches the check off; the
scheduler's check at dispatch stays.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from cordum.approval import job_hash
from cordum.config import ConfigError
from cordum.gateway.core.errors import PolicyUnavailable, Throttled
from cordum.gateway.core.kernel import NO_KERNEL_REASON
from cordum.metrics import METRICS
from cordum.safety.client import Decision, SafetyVerdict
from cordum.scheduler.constraints import safety_meta

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from cordum.config import Settings
    from cordum.protocol import JobRequest
    from cordum.safety.breaker import RedisScriptingProtocol

log = logging.getLogger(__name__)

SUBMIT_POLICY_CHECK_ENV = "CORDUM_SUBMIT_POLICY_CHECK"
"""on (default) / off: whether the gateway asks the kernel before accepting a job."""
THROTTLE_RETRY_AFTER_S = 30
"""Retry-After of a job the policy throttles (Cordum's constant)."""
UNAVAILABLE_RETRY_AFTER_S = 5
"""Retry-After of a 503 while the kernel cannot be asked (the engine's safety retry delay)."""
DENIED_CODE = "safety_denied"

_ON = frozenset({"1", "true", "on", "yes"})
_OFF = frozenset({"0", "false", "off", "no"})


class PolicyChecker(Protocol):
    """The safety kernel port (``cordum.safety.client.SafetyClient``)."""

    async def check(self, req: JobRequest, tenant: str) -> SafetyVerdict: ...


class SubmitOutcome(StrEnum):
    ALLOW = "allow"
    """Store PENDING and publish (also a fail-open bypass and a switched-off check)."""
    DENY = "deny"
    THROTTLE = "throttle"
    APPROVAL = "approval"
    UNAVAILABLE = "unavailable"
    """The kernel could not be asked and the fail mode is closed."""


@dataclass(frozen=True, slots=True)
class SubmitDecision:
    outcome: SubmitOutcome
    verdict: SafetyVerdict
    fields: Mapping[str, str] = field(default_factory=dict)
    """job:meta fields recording the decision (DENY and APPROVAL), as the engine names them."""


def throttled(reason: str) -> Throttled:
    return Throttled(reason or "throttled by policy", "safety_throttled",
                     THROTTLE_RETRY_AFTER_S)


def unavailable(reason: str) -> PolicyUnavailable:
    return PolicyUnavailable(reason, UNAVAILABLE_RETRY_AFTER_S)


def safety_fields(verdict: SafetyVerdict, req: JobRequest) -> dict[str, str]:
    """The safety record in job:meta, field for field as ``Engine.decide`` writes it.

    ``safety_job_hash`` is taken over ``req`` exactly as it is stored, so the
    approval endpoints and the engine's approval fast path find it unchanged.
    """
    return safety_meta(verdict, job_hash(req))


class PendingPayloads:
    """Payloads of jobs being checked before they are stored, read by the safety
    client as if from Redis (no round trip: the gateway holds them already)."""

    def __init__(self) -> None:
        self._held: dict[str, bytes] = {}

    @contextlib.contextmanager
    def holding(self, ptr: str, payload: bytes) -> Iterator[None]:
        self._held[ptr] = payload
        try:
            yield
        finally:
            self._held.pop(ptr, None)

    async def read(self, ptr: str) -> bytes | None:
        return self._held.get(ptr)


class SubmitPolicy:
    """Asks the kernel about a job about to be accepted and says what to do with it.

    ``checker`` None means no kernel address is configured: every check is
    UNAVAILABLE and the fail mode decides. ``enabled`` False accepts every job
    without asking (the scheduler still checks at dispatch).
    """

    def __init__(self, checker: PolicyChecker | None, *, fail_open: bool,
                 enabled: bool = True, payloads: PendingPayloads | None = None) -> None:
        self._checker = checker
        self._fail_open = fail_open
        self.enabled = enabled
        self._payloads = payloads

    async def decide(self, req: JobRequest, tenant: str, *,
                     payload: bytes | None = None) -> SubmitDecision:
        """The decision for ``req``; on a fail-open bypass ``req`` gets the bypass labels.
        ``payload`` (not stored yet) is what the kernel derives risk tags from."""
        if not self.enabled:
            return SubmitDecision(SubmitOutcome.ALLOW,
                                  SafetyVerdict(Decision.ALLOW, "not checked"))
        if self._payloads is not None and payload is not None:
            with self._payloads.holding(req.context_ptr, payload):
                verdict = await self._ask(req, tenant)
        else:
            verdict = await self._ask(req, tenant)
        METRICS.count("submit_policy", decision=verdict.decision.value)
        if verdict.approval_required and verdict.decision in (Decision.ALLOW,
                                                              Decision.ALLOW_WITH_CONSTRAINTS):
            verdict = replace(verdict, decision=Decision.REQUIRE_APPROVAL)
        if verdict.decision is Decision.UNAVAILABLE:
            if not self._fail_open:
                return SubmitDecision(SubmitOutcome.UNAVAILABLE, verdict)
            # Fail-open is the operator's explicit choice; the job carries the mark.
            log.warning("safety unavailable, fail-open: accepting %s (%s)", req.job_id,
                        verdict.reason)
            req.labels["safety_bypassed"] = "true"
            req.labels["safety_bypass_reason"] = verdict.reason[:256]
            return SubmitDecision(SubmitOutcome.ALLOW,
                                  replace(verdict, decision=Decision.ALLOW, rule_id="fail-open"))
        if verdict.decision in (Decision.ALLOW, Decision.ALLOW_WITH_CONSTRAINTS):
            return SubmitDecision(SubmitOutcome.ALLOW, verdict)
        if verdict.decision is Decision.THROTTLE:
            return SubmitDecision(SubmitOutcome.THROTTLE, verdict)
        if verdict.decision is Decision.REQUIRE_APPROVAL:
            return SubmitDecision(SubmitOutcome.APPROVAL, verdict, safety_fields(verdict, req))
        return SubmitDecision(SubmitOutcome.DENY, verdict, safety_fields(verdict, req))

    async def aclose(self) -> None:
        """Close the kernel channel (end of a service or a test)."""
        close = getattr(self._checker, "aclose", None)
        if close is not None:
            await close()

    async def _ask(self, req: JobRequest, tenant: str) -> SafetyVerdict:
        if self._checker is None:
            return SafetyVerdict(Decision.UNAVAILABLE, NO_KERNEL_REASON)
        try:
            return await self._checker.check(req, tenant)
        except Exception as exc:  # the client reports kernel trouble itself; this is a bug
            log.exception("policy check of %s failed", req.job_id)
            return SafetyVerdict(Decision.UNAVAILABLE, f"policy check failed: {exc}")


def check_enabled(env: Mapping[str, str] | None = None) -> bool:
    """CORDUM_SUBMIT_POLICY_CHECK: on unless set to 0/false/off/no; anything else fails fast."""
    raw = (os.environ if env is None else env).get(SUBMIT_POLICY_CHECK_ENV, "").strip().lower()
    if not raw or raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ConfigError(f"{SUBMIT_POLICY_CHECK_ENV}: must be on or off, got {raw!r}")


def from_settings(cfg: Settings, redis: RedisScriptingProtocol | None, *,
                  env: Mapping[str, str] | None = None, breaker_key_prefix: str = "",
                  ) -> SubmitPolicy:
    """The policy wired as the scheduler wires its check: the kernel at
    ``cfg.safety_kernel_addr`` behind the circuit breaker shared through Redis,
    and the input fail mode (POLICY_CHECK_FAIL_MODE over safety.yaml)."""
    from cordum.safety.breaker import CircuitBreaker
    from cordum.safety.client import SafetyClient, policy_reads_payloads
    from cordum.safety.failmode import FailMode, input_fail_mode
    from cordum.safety.tls import client_tls_from_env

    env = os.environ if env is None else env
    if not check_enabled(env):
        log.info("submit-time policy check is off (%s); the scheduler checks at dispatch",
                 SUBMIT_POLICY_CHECK_ENV)
        return SubmitPolicy(None, fail_open=False, enabled=False)
    fail_open = input_fail_mode(env, config_dir=cfg.config_dir) is FailMode.OPEN
    addr = cfg.safety_kernel_addr.strip()
    checker: Any = None
    payloads = PendingPayloads() if policy_reads_payloads(cfg.config_dir) else None
    if addr:
        checker = SafetyClient(addr, cfg.safety_timeout_s,
                               breaker=CircuitBreaker(redis, key_prefix=breaker_key_prefix),
                               tls=client_tls_from_env(env),
                               payload_reader=payloads.read if payloads else None)
    else:
        log.warning("%s: every submit is treated as if the kernel were down (fail mode %s)",
                    NO_KERNEL_REASON, "open" if fail_open else "closed")
    return SubmitPolicy(checker, fail_open=fail_open, payloads=payloads)
