"""The scheduler's side of the output policy: what happens to a SUCCEEDED result.

Two phases, as in Cordum (engine wiring is the caller's):

``sync_check`` — after the result status is SUCCEEDED, before the state is written.
    Metadata only (the service's CheckMeta, 500 ms). An unreachable kernel is ALLOW
    (fail-open, ``skipped``). QUARANTINE or DENY -> ``quarantine``: the caller
    writes OUTPUT_QUARANTINED instead of SUCCEEDED. REDACT -> the redaction is
    materialized: the result is read, sent to CheckContent (5 s), and the redacted
    text stored at ``res:<job_id>:redacted`` (24 h); the verdict carries its
    pointer, which replaces ``result_ptr``. Any failure on that path quarantines.

``async_check`` — the full content scan. The engine runs it right after the
    metadata check, before the state is written, so the state is written once with the
    final decision (:meth:`cordum.scheduler.output_phase.OutputPhase.check_result`);
    a held output is scanned again once its job is SUCCEEDED. The full content scan
    (CheckContent, 30 s or the caller's shorter bound). Errors follow the output
    fail mode (closed -> QUARANTINE), except a kernel not reached in time (UNAVAILABLE,
    DEADLINE_EXCEEDED, circuit open) under fail-closed: the verdict is ``held``, no
    decision, nothing recorded; the output stays unserved until a later check decides
    (:mod:`cordum.scheduler.held_outputs`). ``quarantine`` means: the state written is
    OUTPUT_QUARANTINED, or for a held job, under the job lock, if the job is still
    SUCCEEDED, move it to OUTPUT_QUARANTINED and emit the DLQ
    entry with code :data:`ASYNC_QUARANTINE_CODE`. A REDACT decided here (a rule
    with content patterns, which the meta phase cannot see) is stored like the sync
    one and the verdict's ``result_ptr`` is the redacted pointer for the caller to
    swap in; Cordum ignores a REDACT in this phase, leaving such rules without
    effect. A result larger than the service reads (:data:`MAX_CONTENT_BYTES`) is
    never passed as scanned: its tail follows the fail mode too (closed ->
    QUARANTINE without asking; open -> the head's decision, the reason saying the
    rest went unscanned). It is a coroutine; in Lambda the handler must await it
    before returning (a task left pending is frozen with the container and may
    never finish). Its record (phase ``async``) is what makes the decision final:
    the API serves a result only then.

Both record the decision as JSON at ``job:<id>:output_decision`` (7 days); the
same document (:meth:`OutputVerdict.record`) is what Cordum keeps in the job meta
field ``output_safety``. A failed record write is logged, never raised: the
decision itself has been made. The engine passes ``record=False`` and writes the
record with the job's state instead (no extra round trip).

:meth:`OutputChecker.prefetch` reads, in one round trip, what both phases need
(:mod:`cordum.scheduler.output_prefetch`), so neither phase reads again.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from cordum import protocol
from cordum.safety.failmode import FailMode
from cordum.safety.output_client import (
    CONTENT_TIMEOUT_S,
    REDACT_TIMEOUT_S,
    OutputCheckRequest,
    OutputCheckResult,
)
from cordum.safety.output_wire import MAX_CONTENT_BYTES, OutputDecision
from cordum.scheduler.output_prefetch import Prefetched, prefetch
from cordum.store.output_records import OutputRecords
from cordum.store.results import DECISION_TTL_S, decision_key, redacted_key
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.safety.output_client import OutputPolicyClient

log = logging.getLogger("cordum.scheduler.output_check")

QUARANTINE_REASON_CODE = "output_quarantined"
"""DLQ error code of a sync quarantine (Cordum's outputPolicyReason)."""
ASYNC_QUARANTINE_CODE = "output_quarantined_async"
UNAVAILABLE_QUARANTINE_CODE = "output_check_unavailable"
"""DLQ error code of an output held past the hold limit, the kernel still unreachable."""
DEFAULT_QUARANTINE_REASON = "output quarantined by policy"
REDACTED_TTL_S = 24 * 3600
CONTENT_TYPE_LABEL = "content_type"


class OutputStore(Protocol):
    """The Redis commands used here (``redis.asyncio.Redis`` has them)."""

    async def get(self, name: str) -> Any: ...
    async def set(self, name: str, value: Any, ex: Any = None) -> Any: ...
    async def strlen(self, name: str) -> Any: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...
    def register_script(self, script: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class OutputVerdict:
    decision: OutputDecision
    phase: str
    """``sync`` or ``async``."""
    quarantine: bool
    """The caller must put the job in OUTPUT_QUARANTINED."""
    reason: str = ""
    rule_id: str = ""
    policy_snapshot: str = ""
    result_ptr: str = ""
    """The pointer the job's result should carry: the redacted one after a REDACT."""
    skipped: bool = False
    """No answer from the kernel; the decision is the fail-open/-closed default."""
    checked_at: int = field(default_factory=lambda: time.time_ns() // 1000)
    """When the decision was made (µs)."""
    held: bool = False
    """No decision: the kernel was not reached (fail-closed); check again later."""

    def record(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "decision": self.decision.value, "phase": self.phase,
            "quarantined": self.quarantine, "reason": self.reason, "rule_id": self.rule_id,
            "policy_snapshot": self.policy_snapshot, "skipped": self.skipped,
            "checked_at": self.checked_at}
        if self.decision is OutputDecision.REDACT and not self.quarantine:
            doc["redacted_ptr"] = self.result_ptr
        return doc

    def record_json(self) -> str:
        return json.dumps(self.record(), separators=(",", ":"))


class OutputChecker:
    def __init__(self, client: OutputPolicyClient, store: OutputStore) -> None:
        self.client = client
        self.store = store
        self.records = OutputRecords(store)

    async def prefetch(self, job_id: str, result_ptr: str) -> Prefetched:
        """The stored request, the result's size and head, in one round trip; a failed
        read gives an empty prefetch, never an error."""
        return await prefetch(self.records, job_id, result_ptr)

    async def sync_check(self, res: Any, topic: str, tenant: str, *,
                         labels: Mapping[str, str] | None = None,
                         prefetched: Prefetched | None = None,
                         record: bool = True) -> OutputVerdict:
        """The sync phase for a SUCCEEDED ``JobResult``; see the module docstring."""
        req = await self._request(res.job_id, topic, tenant, res.result_ptr, labels, prefetched)
        verdict = await self._meta_verdict(req, await self.client.check_meta(req), prefetched)
        if record:
            await self._record(res.job_id, verdict)
        return verdict

    async def check_both(self, res: Any, topic: str, tenant: str, *,
                         labels: Mapping[str, str], prefetched: Prefetched, timeout_s: float
                         ) -> tuple[OutputVerdict, OutputVerdict | None] | None:
        """Both phases of a SUCCEEDED ``JobResult`` in one kernel call (nothing
        recorded), when the prefetch holds the whole result and the content scan would
        send it as it is: (the sync verdict, the async verdict, None when the sync one
        leaves the scan to be made on its own: a quarantine ends the checks, a
        redaction is scanned from its redacted copy). None when one call cannot do it
        (a larger result, a kernel without the method): the caller runs the phases."""
        content = b"" if prefetched.missing else prefetched.content
        if content is None:
            return None
        text, complete = _scan_text(content)
        req = await self._request(res.job_id, topic, tenant, res.result_ptr, labels, prefetched)
        if not complete or req.size_bytes > MAX_CONTENT_BYTES:
            return None
        answers = await self.client.check_result(req, text, timeout_s=timeout_s)
        if answers is None:
            return None
        meta, scanned = answers
        sync = await self._meta_verdict(req, meta, prefetched)
        if scanned is None or sync.quarantine or sync.decision is not OutputDecision.ALLOW:
            return sync, None
        return sync, await self._check_whole(req, text, timeout_s, answer=scanned)

    async def _meta_verdict(self, req: OutputCheckRequest, meta: OutputCheckResult,
                            prefetched: Prefetched | None) -> OutputVerdict:
        if meta.decision in (OutputDecision.QUARANTINE, OutputDecision.DENY):
            return _verdict(meta, "sync", quarantine=True, result_ptr=req.result_ptr)
        if meta.decision is OutputDecision.REDACT:
            return await self._materialize(req, meta, prefetched)
        return _verdict(meta, "sync", quarantine=False, result_ptr=req.result_ptr)

    async def async_check(self, job_id: str, topic: str, tenant: str, result_ptr: str, *,
                          labels: Mapping[str, str] | None = None,
                          timeout_s: float = CONTENT_TIMEOUT_S,
                          prefetched: Prefetched | None = None,
                          record: bool = True) -> OutputVerdict:
        """The content scan of a job already SUCCEEDED; ``timeout_s`` bounds the RPC
        (pass less when the invocation has less time left)."""
        req = await self._request(job_id, topic, tenant, result_ptr, labels, prefetched)
        content = prefetched.content if prefetched is not None else None
        unreadable = ""
        if content is None and not (prefetched is not None and prefetched.missing):
            try:
                # One byte past the limit tells a result that does not fit from one
                # that does.
                content = await self._content(result_ptr, limit=MAX_CONTENT_BYTES + 1,
                                              strict=True)
            except Exception as exc:  # the API may read it later: it is not "empty"
                unreadable = str(exc) or type(exc).__name__
        text, complete = _scan_text(content or b"")
        size = max(req.size_bytes, len(content or b""))
        if unreadable:
            verdict = self._unscanned(req, "result unreadable", unreadable)
        elif not complete or size > MAX_CONTENT_BYTES:
            verdict = await self._check_partial(req, text, size, timeout_s)
        else:
            verdict = await self._check_whole(req, text, timeout_s)
        if record and not verdict.held:
            await self._record(job_id, verdict)
        return verdict

    async def _check_whole(self, req: OutputCheckRequest, text: str, timeout_s: float, *,
                           answer: OutputCheckResult | None = None) -> OutputVerdict:
        """The scan of ``text`` (``answer``: the kernel's, already in hand)."""
        result = answer or await self.client.check_content(req, text, timeout_s=timeout_s)
        if result.unavailable and self.client.fail_mode is not FailMode.OPEN:
            return replace(_verdict(result, "async", quarantine=False,
                                    result_ptr=req.result_ptr), held=True)
        if result.decision is OutputDecision.REDACT and not result.failed:
            verdict = await self._store_redacted(req, result, "async")
        else:
            quarantine = result.decision in (OutputDecision.QUARANTINE, OutputDecision.DENY)
            verdict = _verdict(result, "async", quarantine=quarantine, result_ptr=req.result_ptr)
        return verdict

    async def _check_partial(self, req: OutputCheckRequest, text: str, size: int,
                             timeout_s: float) -> OutputVerdict:
        """A result the content check cannot read whole: what lies past the limit is
        unscanned, so it follows the output fail mode as a kernel error would."""
        limit = f"{size} bytes, over the {MAX_CONTENT_BYTES}-byte content scan limit"
        if self.client.fail_mode is not FailMode.OPEN:
            return self._unscanned(req, "result not scanned whole", limit)
        result = await self.client.check_content(req, text, timeout_s=timeout_s)
        if result.decision is OutputDecision.REDACT and not result.failed:
            # A redacted copy of the head alone would drop the rest of the result.
            return OutputVerdict(OutputDecision.QUARANTINE, "async", True,
                                 f"redaction of a partly scanned result ({limit})",
                                 result.rule_id, result.policy_snapshot, req.result_ptr)
        quarantine = result.decision in (OutputDecision.QUARANTINE, OutputDecision.DENY)
        verdict = _verdict(result, "async", quarantine=quarantine, result_ptr=req.result_ptr)
        if quarantine:
            return verdict
        why = f"only the first {MAX_CONTENT_BYTES} bytes scanned ({limit}; fail-open)"
        return replace(verdict, reason=f"{verdict.reason}; {why}" if verdict.reason else why)

    def _unscanned(self, req: OutputCheckRequest, what: str, detail: str) -> OutputVerdict:
        """The fail mode's verdict on a result the content check did not see (whole),
        as on a kernel error: closed -> QUARANTINE, open -> ALLOW; the reason says so."""
        mode = self.client.fail_mode
        decision = OutputDecision.ALLOW if mode is FailMode.OPEN else OutputDecision.QUARANTINE
        return OutputVerdict(decision, "async", mode is not FailMode.OPEN,
                             f"{what} ({detail}; fail-{mode.value})",
                             result_ptr=req.result_ptr, skipped=True)

    async def _materialize(self, req: OutputCheckRequest, meta: OutputCheckResult,
                           prefetched: Prefetched | None = None) -> OutputVerdict:
        def failed(why: str) -> OutputVerdict:
            return OutputVerdict(OutputDecision.QUARANTINE, "sync", True,
                                 f"redaction failed: {why}", meta.rule_id,
                                 meta.policy_snapshot, req.result_ptr)

        content = prefetched.content if prefetched is not None else None
        if content is None and not (prefetched is not None and prefetched.missing):
            content = await self._content(req.result_ptr)
        if content is None:
            return failed("result not found")
        if len(content) > MAX_CONTENT_BYTES:
            # The service sees at most this much; a partial redaction would drop the rest.
            return failed(f"result larger than {MAX_CONTENT_BYTES} bytes")
        result = await self.client.check_content(req, as_text(content, "replace"),
                                                 timeout_s=REDACT_TIMEOUT_S)
        if result.failed:
            return failed(result.error or "output policy unavailable")
        if result.decision in (OutputDecision.QUARANTINE, OutputDecision.DENY):
            return _verdict(result, "sync", quarantine=True, result_ptr=req.result_ptr)
        if result.decision is not OutputDecision.REDACT:
            return failed("content check did not confirm the redaction")
        return await self._store_redacted(req, result, "sync")

    async def _store_redacted(self, req: OutputCheckRequest, result: OutputCheckResult,
                              phase: str) -> OutputVerdict:
        """Store the redacted text; a verdict pointing at it, or a quarantine."""
        def failed(why: str) -> OutputVerdict:
            return OutputVerdict(OutputDecision.QUARANTINE, phase, True,
                                 f"redaction failed: {why}", result.rule_id,
                                 result.policy_snapshot, req.result_ptr)

        if result.redacted_content is None:
            return failed("no redacted content returned")
        key = redacted_key(req.job_id)
        try:
            await self.store.set(key, result.redacted_content.encode(), ex=REDACTED_TTL_S)
        except Exception as exc:
            log.warning("job %s: storing redacted result failed: %s", req.job_id, exc)
            return failed(f"storing redacted result: {exc}")
        return _verdict(result, phase, quarantine=False, result_ptr=protocol.pointer(key))

    async def _request(self, job_id: str, topic: str, tenant: str, result_ptr: str,
                       labels: Mapping[str, str] | None,
                       prefetched: Prefetched | None = None) -> OutputCheckRequest:
        labels = dict(labels or {})
        size = 0
        if prefetched is not None:
            size = prefetched.size
        elif result_ptr:
            try:
                size = int(await self.store.strlen(protocol.key_from_pointer(result_ptr)))
            except Exception as exc:  # the size only sharpens size rules; go on without
                log.warning("job %s: result size unknown: %s", job_id, exc)
        return OutputCheckRequest(job_id=job_id, topic=topic, tenant=tenant,
                                  result_ptr=result_ptr,
                                  content_type=labels.get(CONTENT_TYPE_LABEL, ""),
                                  size_bytes=size, labels=labels)

    async def _content(self, result_ptr: str, *, limit: int = 0,
                       strict: bool = False) -> bytes | None:
        """The result (its first ``limit`` bytes when ``limit``); None when absent,
        and when the read fails unless ``strict`` (then it raises)."""
        if not result_ptr:
            return None
        key = protocol.key_from_pointer(result_ptr)
        try:
            if limit:
                raw = await self.store.getrange(key, 0, limit - 1)  # type: ignore[attr-defined]
                raw = raw or None  # GETRANGE of a missing key is empty
            else:
                raw = await self.store.get(key)
        except Exception as exc:
            log.warning("reading result %s failed: %s", result_ptr, exc)
            if strict:
                raise
            return None
        if raw is None:
            return None
        return raw if isinstance(raw, bytes) else str(raw).encode()

    async def _record(self, job_id: str, verdict: OutputVerdict) -> None:
        try:
            await self.store.set(decision_key(job_id), verdict.record_json(),
                                 ex=DECISION_TTL_S)
        except Exception as exc:
            log.warning("job %s: recording output decision failed: %s", job_id, exc)


def _verdict(result: OutputCheckResult, phase: str, *, quarantine: bool,
             result_ptr: str) -> OutputVerdict:
    reason = result.reason
    if quarantine and not reason:
        reason = DEFAULT_QUARANTINE_REASON
    return OutputVerdict(result.decision, phase, quarantine, reason, result.rule_id,
                         result.policy_snapshot, result_ptr, result.failed)


def _scan_text(content: bytes) -> tuple[str, bool]:
    """The first MAX_CONTENT_BYTES of ``content`` as text that still fits the limit
    once re-encoded (each undecodable byte becomes a 3-byte U+FFFD), and whether
    that text is all of ``content``."""
    text = as_text(content[:MAX_CONTENT_BYTES], "replace")
    complete = len(content) <= MAX_CONTENT_BYTES
    encoded = text.encode()
    if len(encoded) > MAX_CONTENT_BYTES:
        text = encoded[:MAX_CONTENT_BYTES].decode("utf-8", "ignore")
        complete = False
    return text, complete
