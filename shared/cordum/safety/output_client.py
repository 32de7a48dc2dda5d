"""Client of the output policy service (wire format: :mod:`cordum.safety.output_service`).

Errors never reach the caller; each check turns them into a decision, as Cordum's
scheduler does:

- ``check_meta`` (sync phase, :data:`META_TIMEOUT_S`): any error is ALLOW with
  ``skipped=True`` (fail-open: the hot path never blocks on the kernel).
- ``check_result``: both in one call (the service's CheckResult), each answer (or
  error) as the two calls would give it; None from a kernel without the method.
- ``check_content`` (async phase, :data:`CONTENT_TIMEOUT_S`; the REDACT
  materialization passes :data:`REDACT_TIMEOUT_S`): an error follows the output
  fail mode: ``open`` -> ALLOW, ``closed`` (default) -> QUARANTINE; either way
  ``failed=True`` so a caller that needs a real answer (materialization) can tell.

``unavailable=True`` marks a kernel that could not be reached in time (UNAVAILABLE,
DEADLINE_EXCEEDED, or the circuit open): asking again later may get an answer. Any
other failure (another status, an answer that does not decode) is not marked.

The fail mode is ``OUTPUT_POLICY_FAIL_MODE`` if set, else safety.yaml
``output_policy.fail_mode``, else closed; an explicit ``fail_mode`` argument wins.

An open breaker fails the call without contacting the kernel. After UNAVAILABLE
(or another transport error) the channel is dropped and rebuilt; after UNAVAILABLE
the call is retried once on the new channel when the deadline leaves room.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError
from cordum.safety.breaker import OUTPUT_BREAKER_KEY, CircuitBreaker
from cordum.safety.failmode import FailMode, output_fail_mode
from cordum.safety.kernel_call import CHANNEL_OPTIONS, call_with_one_retry
from cordum.safety.output_wire import (
    CHECK_CONTENT_METHOD,
    CHECK_META_METHOD,
    CHECK_RESULT_METHOD,
    MAX_MESSAGE_BYTES,
    OutputDecision,
    decode,
    encode,
)
from cordum.safety.tls import PLAINTEXT, client_tls_from_env

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import grpc.aio

    from cordum.safety.breaker import Breaker
    from cordum.safety.tls import ClientTLS

META_TIMEOUT_ENV = "CORDUM_OUTPUT_META_TIMEOUT_MS"
META_TIMEOUT_S = 0.5
REDACT_TIMEOUT_S = 5.0
CONTENT_TIMEOUT_S = 30.0
CIRCUIT_OPEN_REASON = "output policy circuit open"


@dataclass(frozen=True, slots=True)
class OutputCheckRequest:
    """What is sent for one job result (``content`` only by ``check_content``)."""

    job_id: str
    topic: str
    tenant: str = ""
    result_ptr: str = ""
    content_type: str = ""
    size_bytes: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)

    def body(self, content: str | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "job_id": self.job_id, "topic": self.topic, "tenant": self.tenant,
            "result_ptr": self.result_ptr, "content_type": self.content_type,
            "size_bytes": self.size_bytes, "labels": dict(self.labels)}
        if content is not None:
            doc["content"] = content
        return doc


@dataclass(frozen=True, slots=True)
class OutputCheckResult:
    decision: OutputDecision
    reason: str = ""
    rule_id: str = ""
    policy_snapshot: str = ""
    redacted_content: str | None = None
    skipped: bool = False
    """check_meta only: the kernel gave no answer and ALLOW was assumed."""
    failed: bool = False
    """The kernel gave no answer; ``decision`` comes from the fail mode."""
    error: str = ""
    unavailable: bool = False
    """``failed`` because the kernel could not be reached in time (UNAVAILABLE,
    DEADLINE_EXCEEDED, circuit open): a later call may get an answer."""


def meta_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """``CORDUM_OUTPUT_META_TIMEOUT_MS`` in seconds, else :data:`META_TIMEOUT_S`."""
    env = os.environ if env is None else env
    raw = env.get(META_TIMEOUT_ENV, "").strip()
    if not raw:
        return META_TIMEOUT_S
    try:
        ms = int(raw)
    except ValueError:
        raise ConfigError(f"{META_TIMEOUT_ENV}: must be an integer, got {raw!r}") from None
    if ms <= 0:
        raise ConfigError(f"{META_TIMEOUT_ENV}: must be positive, got {ms}")
    return ms / 1000


class _CallError(Exception):
    def __init__(self, message: str, *, circuit_open: bool = False) -> None:
        super().__init__(message)
        self.circuit_open = circuit_open

    @property
    def unimplemented(self) -> bool:
        """The kernel answered that it has no such method (a release before it)."""
        import grpc

        code = getattr(self.__cause__, "code", None)
        return callable(code) and code() is grpc.StatusCode.UNIMPLEMENTED

    @property
    def unavailable(self) -> bool:
        """The kernel was not reached in time: the circuit is open, or the RPC ended
        UNAVAILABLE or DEADLINE_EXCEEDED (the status is on the cause)."""
        if self.circuit_open:
            return True
        import grpc

        code = getattr(self.__cause__, "code", None)
        return callable(code) and code() in (grpc.StatusCode.UNAVAILABLE,
                                             grpc.StatusCode.DEADLINE_EXCEEDED)


class OutputPolicyClient:
    """Checks job results against the output policy service.

    ``breaker`` defaults to an in-process breaker under the output key; processes
    sharing Redis pass ``CircuitBreaker(redis, key=OUTPUT_BREAKER_KEY)``.
    """

    def __init__(
        self,
        addr: str,
        *,
        breaker: Breaker | None = None,
        fail_mode: FailMode | None = None,
        meta_timeout: float | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        self._addr = addr
        if tls is None and channel_factory is None:
            tls = client_tls_from_env()
        self._tls = tls
        self._breaker: Breaker = breaker or CircuitBreaker(None, key=OUTPUT_BREAKER_KEY)
        self.fail_mode = fail_mode if fail_mode is not None else output_fail_mode()
        self.meta_timeout_s = meta_timeout if meta_timeout is not None else meta_timeout_s()
        self._channel_factory = channel_factory
        self._channel: grpc.aio.Channel | None = None
        self._calls: dict[str, Any] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.combined = True
        """The kernel answers CheckResult (False once it said it does not)."""

    async def check_meta(self, req: OutputCheckRequest) -> OutputCheckResult:
        try:
            doc = await self._call(CHECK_META_METHOD, req.body(), self.meta_timeout_s)
        except _CallError as exc:
            return _meta_failed(exc)
        return _result(doc)

    async def check_content(self, req: OutputCheckRequest, content: str, *,
                            timeout_s: float = CONTENT_TIMEOUT_S) -> OutputCheckResult:
        try:
            doc = await self._call(CHECK_CONTENT_METHOD, req.body(content), timeout_s)
        except _CallError as exc:
            return self._content_failed(exc)
        return _result(doc)

    async def check_result(self, req: OutputCheckRequest, content: str, *,
                           timeout_s: float = CONTENT_TIMEOUT_S
                           ) -> tuple[OutputCheckResult, OutputCheckResult | None] | None:
        """``check_meta`` and, when it allows, ``check_content`` in one RPC instead of
        two: (the metadata answer, the content answer or None when the metadata answer
        is not ALLOW). A kernel not reached gives both failures as the two calls give
        them. None when the kernel has no such method (an older release): the caller
        makes the two calls, as this client does from then on."""
        if not self.combined:
            return None
        try:
            doc = await self._call(CHECK_RESULT_METHOD, req.body(content), timeout_s)
        except _CallError as exc:
            if exc.unimplemented:
                self.combined = False
                return None
            return _meta_failed(exc), self._content_failed(exc)
        if not isinstance(doc, dict):
            return _result(doc), None
        meta = _result(doc.get("meta"))
        content_doc = doc.get("content")
        if meta.decision is not OutputDecision.ALLOW or content_doc is None:
            return meta, None
        return meta, _result(content_doc)

    def _content_failed(self, exc: _CallError) -> OutputCheckResult:
        if self.fail_mode is FailMode.OPEN:
            return OutputCheckResult(OutputDecision.ALLOW,
                                     f"output policy unavailable (fail-open): {exc}",
                                     failed=True, error=str(exc),
                                     unavailable=exc.unavailable)
        return OutputCheckResult(OutputDecision.QUARANTINE,
                                 f"output policy unavailable (fail-closed): {exc}",
                                 failed=True, error=str(exc), unavailable=exc.unavailable)

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        self._calls.clear()
        if channel is not None:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _call(self, method: str, body: dict[str, Any], timeout_s: float) -> Any:
        admission = await self._breaker.allow()
        if not admission.admitted:
            raise _CallError(CIRCUIT_OPEN_REASON, circuit_open=True)
        try:
            doc = await self._rpc(method, body, timeout_s)
        except _CallError as exc:
            if exc.unimplemented:  # an answer: the kernel is up
                await self._breaker.record_success(admission)
            else:
                await self._breaker.record_failure(admission)
            raise
        await self._breaker.record_success(admission)
        return doc

    def _connect(self) -> grpc.aio.Channel:
        if self._channel_factory is not None:
            self._channel = self._channel_factory(self._addr)
        else:
            options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                       ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                       *CHANNEL_OPTIONS]
            self._channel = (self._tls or PLAINTEXT).channel(self._addr, options=options)
        self._calls.clear()
        return self._channel

    def _callable(self, method: str) -> Any:
        channel = self._channel or self._connect()
        if method not in self._calls:
            self._calls[method] = channel.unary_unary(
                method, request_serializer=encode, response_deserializer=decode)
        return self._calls[method]

    def _drop_channel(self, grace_s: float) -> None:
        channel, self._channel = self._channel, None
        self._calls.clear()
        if channel is None:
            return
        # Calls still in flight on the old channel keep the rest of their deadline.
        task = asyncio.ensure_future(channel.close(grace=grace_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _rpc(self, method: str, body: dict[str, Any], timeout_s: float) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout_s
        return await call_with_one_retry(
            lambda: self._callable(method), body, deadline,
            drop_channel=lambda: self._drop_channel(timeout_s), error=_CallError)


def _meta_failed(exc: _CallError) -> OutputCheckResult:
    return OutputCheckResult(OutputDecision.ALLOW, "output policy check skipped",
                             skipped=True, failed=True, error=str(exc),
                             unavailable=exc.unavailable)


def _result(doc: Any) -> OutputCheckResult:
    if not isinstance(doc, dict):
        return OutputCheckResult(OutputDecision.QUARANTINE, "malformed output policy answer")
    try:
        decision = OutputDecision(str(doc.get("decision", "")).upper())
    except ValueError:
        # An answer this release cannot read must not let the output through.
        decision = OutputDecision.QUARANTINE
    redacted = doc.get("redacted_content")
    return OutputCheckResult(decision, str(doc.get("reason") or ""),
                             str(doc.get("rule_id") or ""),
                             str(doc.get("policy_snapshot") or ""),
                             redacted if isinstance(redacted, str) else None)
