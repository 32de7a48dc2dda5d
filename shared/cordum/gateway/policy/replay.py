"""Policy replay: the caller's tenant's recorded jobs decided again under a policy (the
one in force, or the one a candidate bundle would make), compared with what was
recorded (docs/http-api.md, "Policy replay").

The policy is built as the kernel builds it: the base file (safety.yaml) merged with
the enabled bundles in id order, the candidate replacing (or added as) its bundle and
in force. Each job is decided from its stored request (``job:req:<id>``; its topic
and labels from the meta when the request is gone) with no velocity window, so a
rule with a velocity limit never matches here; the answer's ``warnings`` say so.

The recorded decision is the meta's ``safety_decision`` (empty: ALLOW). A job a person
approved carries ALLOW there since the dispatch re-check; its policy decision was
REQUIRE_APPROVAL (``safety_approval_required``), which is what it is compared with.

Bounds, per call: at most ``max_jobs`` index entries looked at (≤ 1000), read in
pipelined batches of :data:`~cordum.gateway.policy.history.READ_BATCH`; at most
``limit`` changes answered; at most :attr:`ReplayBounds.time_budget_s` of scanning,
less when the Lambda invocation ends sooner. The first bound reached ends the call
with ``truncated: true`` and a ``next_cursor`` that goes on from the last job looked
at; ``summary`` and ``rule_hits`` count this call's jobs only.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import InvalidRequest, NotFound
from cordum.gateway.core.paging import Position, parse_cursor
from cordum.gateway.core.times import rfc3339_us
from cordum.gateway.policy.changes import VALIDATION_FAILED, BasePolicyUnavailable, validated
from cordum.gateway.policy.history import READ_BATCH, TenantWindow, window_us
from cordum.safety.bundles import Bundle, effective_policy, parse_bundles
from cordum.safety.client import check_request
from cordum.safety.fields import first_glob
from cordum.safety.kernel_service import policy_input
from cordum.store.jobs import decode_labels

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.gateway.policy.changes import BaseFile
    from cordum.gateway.policy.history import Batch, StoredJob
    from cordum.gateway.policy.models import ReplayRequest
    from cordum.gateway.policy.store import PolicyStore
    from cordum.safety.policy import SafetyPolicy
    from cordum.store.reads import RedisReadProtocol

CANDIDATE_ID = "__replay_candidate__"
"""The candidate's bundle id when the body names none (Cordum's)."""
SEVERITY = {"ALLOW": 0, "ALLOW_WITH_CONSTRAINTS": 1, "REQUIRE_APPROVAL": 2, "THROTTLE": 3,
            "DENY": 4}
"""How strict a decision is: a change up is ``escalated``, down ``relaxed``."""
ALLOWING = ("ALLOW", "ALLOW_WITH_CONSTRAINTS")
FIELDS = ("tenant", "topic", "labels", "safety_decision", "safety_approval_required",
          "approval_status")


@dataclass(frozen=True, slots=True)
class ReplayBounds:
    """What one replay call may spend."""

    time_budget_s: float = 10.0
    """Scanning stops after this long, whatever the invocation has left."""
    deadline_margin_s: float = 2.0
    """Scanning stops this long before the Lambda invocation ends (answer, log, close)."""
    batch: int = READ_BATCH
    """Jobs read per pipelined round trip."""


def recorded_decision(meta: dict[str, str]) -> str:
    """The decision the policy gave the job when it ran (see the module docstring)."""
    stored = meta.get("safety_decision", "").strip().upper() or "ALLOW"
    if (stored == "ALLOW" and meta.get("approval_status") == "APPROVED"
            and meta.get("safety_approval_required") == "true"):
        return "REQUIRE_APPROVAL"
    return stored


def direction(original: str, new: str) -> str:
    """``escalated``, ``relaxed`` or ``unchanged`` (an unknown decision: unchanged)."""
    if original not in SEVERITY or new not in SEVERITY:
        return "unchanged"
    step = SEVERITY[new] - SEVERITY[original]
    return "escalated" if step > 0 else "relaxed" if step < 0 else "unchanged"


def change_kind(original: str, new: str) -> str:
    """``allow_to_deny``, ``deny_to_allow``, ``newly_gated`` (now REQUIRE_APPROVAL) or
    ``other``."""
    if original in ALLOWING and new == "DENY":
        return "allow_to_deny"
    if original == "DENY" and new in ALLOWING:
        return "deny_to_allow"
    if new == "REQUIRE_APPROVAL" and original != new:
        return "newly_gated"
    return "other"


async def replay_policy(store: PolicyStore, base_file: BaseFile, body: ReplayRequest
                        ) -> SafetyPolicy:
    """The policy ``body`` names: exactly one of the current policy and a candidate
    (400 ``POLICY_VALIDATION_FAILED`` otherwise, or when the candidate is not valid)."""
    from cordum.safety.policy_file import PolicyError

    candidate = body.candidate_content is not None or bool(body.candidate_bundle_id)
    if candidate == body.use_current_policy:
        raise InvalidRequest("name exactly one policy: use_current_policy, or a candidate "
                             "(candidate_content and/or candidate_bundle_id)",
                             VALIDATION_FAILED)
    bundles = parse_bundles((await store.read()).document)
    if candidate:
        bundle_id = body.candidate_bundle_id or CANDIDATE_ID
        content = body.candidate_content
        if content is None:
            found = bundles.get(bundle_id)
            if found is None:
                raise NotFound("bundle not found")
            content = found.content
        validated(content)
        bundles[bundle_id] = Bundle(bundle_id, content, enabled=True)
    try:
        data, source = base_file()
        return effective_policy(data, source, bundles)
    except (OSError, PolicyError) as exc:
        raise BasePolicyUnavailable(type(exc).__name__) from None
    except ValueError as exc:  # the bundles merged do not make a valid document
        raise InvalidRequest(f"policy bundles do not combine: {exc}",
                             VALIDATION_FAILED) from None


def _request(job: StoredJob) -> Any:
    """The job's stored JobRequest; one rebuilt from its meta when none is stored.
    ValueError when the stored one is not a JobRequest."""
    from google.protobuf import json_format

    from cordum import protocol

    if job.request is None:
        return protocol.JobRequest(job_id=job.job_id, topic=job.meta.get("topic", ""),
                                   labels=decode_labels(job.meta))
    raw = job.request.decode() if isinstance(job.request, bytes) else str(job.request)
    try:
        return json_format.Parse(raw, protocol.JobRequest(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(str(exc)) from None


def warnings_for(policy: SafetyPolicy) -> list[str]:
    doc = policy.document
    paced = [rule.id for rule in doc.rules if rule.velocity is not None]
    out = ["velocity windows are not replayed: a rule with a velocity limit never "
           "matches here" + (f" ({', '.join(paced)})" if paced else
                             " (this policy has none)")]
    if doc.risk_tag_derivers:
        out.append("job payloads are not read: risk tags derived from a payload are "
                   "derived from an empty one")
    return out


@dataclass(slots=True)
class _Tally:
    """What one call found: its counts, rule hits, changes and unreadable jobs."""

    summary: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(
        ("total_jobs", "evaluated", "escalated", "relaxed", "unchanged", "errored"), 0)))
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    changes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


class PolicyReplay:
    """One replay call over ``tenant``'s jobs."""

    def __init__(self, redis: RedisReadProtocol, policy: SafetyPolicy, tenant: str, *,
                 bounds: ReplayBounds | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._policy = policy
        self._tenant = tenant
        self._bounds = bounds or ReplayBounds()
        self._clock = clock

    async def run(self, body: ReplayRequest, *, deadline: float | None = None
                  ) -> dict[str, Any]:
        """The answer (Cordum's shape, plus ``truncated``, ``stopped_by`` and
        ``next_cursor``); ``deadline`` is when the invocation ends (monotonic)."""
        low, high = window_us(body.from_, body.to, VALIDATION_FAILED)
        position = parse_cursor(body.cursor)
        stop_at = self._clock() + self._bounds.time_budget_s
        if deadline is not None:
            stop_at = min(stop_at, deadline - self._bounds.deadline_margin_s)
        pattern = body.filters.topic_pattern.strip()
        wanted = body.filters.original_decision.strip().upper()
        window = TenantWindow(self._redis, self._tenant, low, high)
        tally = _Tally()
        scanned = 0
        stopped = ""
        pending: Batch | None = None
        while not stopped:
            if pending is None:
                pending = await window.entries(
                    position, min(self._bounds.batch, body.max_jobs - scanned))
            entries, exhausted = pending
            more = min(self._bounds.batch, body.max_jobs - scanned - len(entries))
            then = (Position(*entries[-1]), more) if entries and not exhausted and more else None
            jobs, pending = await window.read(entries, FIELDS, with_request=True, then=then)
            found = {j.job_id: j for j in jobs}
            for i, (score, job_id) in enumerate(entries):
                position = Position(score, job_id)
                scanned += 1
                job = found.get(job_id)
                if job is not None and self._chosen(job, pattern, wanted):
                    self._decide(job, tally)
                last = exhausted and i == len(entries) - 1
                stopped = "" if last else self._bound(scanned, body, len(tally.changes),
                                                         stop_at)
                if stopped:
                    break
            if exhausted and not stopped:
                position = None
                break
        return self._answer(low, high, tally, scanned, stopped, position)

    def _decide(self, job: StoredJob, tally: _Tally) -> None:
        """Decide ``job`` again and count the outcome."""
        tally.summary["total_jobs"] += 1
        original = recorded_decision(job.meta)
        try:
            decision = self._policy.evaluate(
                policy_input(check_request(_request(job), self._tenant)), dry_run=True)
        except ValueError as exc:
            tally.summary["errored"] += 1
            tally.errors.append({"job_id": job.job_id, "error": str(exc)[:200]})
            return
        new = decision.decision.value.upper()
        way = direction(original, new)
        tally.summary["evaluated"] += 1
        tally.summary[way] += 1
        tally.hits[(decision.rule_id, new)] += 1
        if way != "unchanged":
            tally.changes.append({
                "job_id": job.job_id, "topic": job.meta.get("topic", ""),
                "tenant": self._tenant, "original_decision": original, "new_decision": new,
                "new_rule_id": decision.rule_id, "new_reason": decision.reason,
                "direction": way, "kind": change_kind(original, new),
                "at": rfc3339_us(job.score)})

    def _bound(self, scanned: int, body: ReplayRequest, changed: int, stop_at: float) -> str:
        """The bound reached after a job, '' for none."""
        if changed >= body.limit:
            return "limit"
        if scanned >= body.max_jobs:
            return "max_jobs"
        if self._clock() >= stop_at:
            return "deadline"
        return ""

    @staticmethod
    def _chosen(job: StoredJob, pattern: str, wanted: str) -> bool:
        if pattern and first_glob([pattern], job.meta.get("topic", "")) is None:
            return False
        return not wanted or recorded_decision(job.meta) == wanted

    def _answer(self, low: int, high: int, tally: _Tally, scanned: int, stopped: str,
                position: Position | None) -> dict[str, Any]:
        warnings = warnings_for(self._policy)
        if stopped:
            warnings.append(f"stopped at the {stopped} bound after {scanned} jobs: "
                            "continue with next_cursor")
        out: dict[str, Any] = {
            "replay_id": str(uuid.uuid4()), "policy_snapshot": self._policy.snapshot,
            "tenant": self._tenant,
            "time_range": {"from": rfc3339_us(low), "to": rfc3339_us(high)},
            "summary": {**tally.summary, "scanned": scanned},
            "rule_hits": [{"rule_id": rule, "decision": decision, "count": n}
                          for (rule, decision), n in sorted(
                              tally.hits.items(), key=lambda kv: (-kv[1], kv[0]))],
            "changes": tally.changes, "warnings": warnings, "truncated": bool(stopped),
            "stopped_by": stopped or None,
            "next_cursor": position.encode() if stopped and position is not None else None,
            "order": "newest_first",
        }
        if tally.errors:
            out["errors"] = tally.errors[:50]
        return out

