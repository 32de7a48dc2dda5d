"""SafetyKernel client used at dispatch time, behind the safety circuit breaker.

Every check has one deadline (``timeout_s``, 2 s by default) covering all its
attempts. An unreachable kernel is reported as UNAVAILABLE, which the scheduler
handles by its input fail mode (closed: retry later). An open breaker answers
UNAVAILABLE "safety kernel circuit open" without calling the kernel.

After UNAVAILABLE or any other transport error the channel is dropped and rebuilt;
after UNAVAILABLE the call is tried once more on the new channel when the deadline
leaves room (:mod:`cordum.safety.kernel_call`, which says why).

Transport: TLS or plaintext from the ``SAFETY_KERNEL_TLS_*`` variables
(:mod:`cordum.safety.tls`), read when the client is built, so a misconfiguration is
a ConfigError at start rather than a failing check.

Payload: with a ``payload_reader`` the client reads the payload behind the job's
``context_ptr`` and sends it as Cordum's scheduler does (``input_content`` up to
2 MiB, ``input_size_bytes``, ``input_content_type`` from label ``content_type``,
label ``_content.payload_json`` when it is UTF-8 and at most 64 KiB), so the kernel
can derive risk tags from it (:mod:`cordum.safety.risk`). Labels under
``_content.`` that came with the job are dropped either way: only this client
describes the payload to the kernel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from cordum.safety.breaker import CircuitBreaker
from cordum.safety.content_labels import CONTENT_LABEL_PREFIX, PAYLOAD_JSON_LABEL
from cordum.safety.kernel_call import CHANNEL_OPTIONS, call_with_one_retry
from cordum.safety.tls import PLAINTEXT, client_tls_from_env

if TYPE_CHECKING:
    from pathlib import Path

    import grpc.aio

    from cordum.config import Settings
    from cordum.protocol import JobRequest
    from cordum.safety.breaker import Breaker
    from cordum.safety.tls import ClientTLS

log = logging.getLogger("cordum.safety.client")

CIRCUIT_OPEN_REASON = "safety kernel circuit open"
EFFECTIVE_CONFIG_ENV = "CORDUM_EFFECTIVE_CONFIG"
"""Job env entry holding the effective config JSON, sent as ``effective_config``."""

MAX_INPUT_CONTENT_BYTES = 2 * 1024 * 1024
"""Payload bytes sent as ``input_content``; ``input_size_bytes`` has the full size."""
MAX_PAYLOAD_JSON_LABEL_BYTES = 64 * 1024
"""Largest payload also sent as label ``_content.payload_json``."""
PAYLOAD_READ_SHARE = 0.5
"""Share of a check's deadline the payload read may use; the RPC keeps the rest."""

PayloadReader = Callable[[str], Awaitable[bytes | None]]
"""Reads the payload a ``context_ptr`` points at (``redis://ctx:<id>``); None if absent."""


class Decision(StrEnum):
    ALLOW = "ALLOW"
    ALLOW_WITH_CONSTRAINTS = "ALLOW_WITH_CONSTRAINTS"
    DENY = "DENY"
    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"
    THROTTLE = "THROTTLE"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class SafetyVerdict:
    decision: Decision
    reason: str = ""
    rule_id: str = ""
    policy_snapshot: str = ""
    constraints: Any = None
    """``cordum.agent.v1.PolicyConstraints`` when the kernel attached constraints."""
    approval_required: bool = False
    """The kernel asks for human approval even though the decision may be ALLOW*."""
    approval_ref: str = ""
    remediations: tuple[Any, ...] = ()
    """``cordum.agent.v1.PolicyRemediation`` messages, in the kernel's order."""


_DECISIONS = {
    1: Decision.ALLOW,
    2: Decision.DENY,
    3: Decision.REQUIRE_APPROVAL,
    4: Decision.THROTTLE,
    5: Decision.ALLOW_WITH_CONSTRAINTS,
}
"""DecisionType numbers (ALLOW=1, DENY=2, REQUIRE_HUMAN=3, THROTTLE=4,
ALLOW_WITH_CONSTRAINTS=5)."""


def decision_from_proto(value: int) -> Decision:
    """Map a DecisionType; UNSPECIFIED and any value this release does not know mean DENY."""
    return _DECISIONS.get(value, Decision.DENY)


def verdict_from_response(resp: Any) -> SafetyVerdict:
    """A SafetyVerdict carrying everything of a PolicyCheckResponse the scheduler uses."""
    return SafetyVerdict(
        decision=decision_from_proto(resp.decision),
        reason=resp.reason,
        rule_id=resp.rule_id,
        policy_snapshot=resp.policy_snapshot,
        constraints=resp.constraints if resp.HasField("constraints") else None,
        approval_required=resp.approval_required,
        approval_ref=resp.approval_ref,
        remediations=tuple(resp.remediations),
    )


def check_request(req: JobRequest, tenant: str, *, payload: bytes | None = None) -> Any:
    """The PolicyCheckRequest for a job, as Cordum's scheduler builds it.

    ``payload`` is what ``context_ptr`` points at (None: not read); see the module
    doc for how it is sent. Job labels under ``_content.`` are never passed on.
    """
    from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
    from cordum.agent.v1 import safety_pb2

    labels = {k: v for k, v in req.labels.items() if not k.startswith(CONTENT_LABEL_PREFIX)}
    request = safety_pb2.PolicyCheckRequest(
        job_id=req.job_id,
        topic=req.topic,
        tenant=tenant,
        priority=req.priority,
        principal_id=req.principal_id,
        labels=labels,
        memory_id=req.memory_id,
    )
    if req.HasField("budget"):
        request.budget.CopyFrom(req.budget)
    if req.HasField("meta"):
        request.meta.CopyFrom(req.meta)
    effective = req.env.get(EFFECTIVE_CONFIG_ENV, "")
    if effective:
        request.effective_config = effective.encode()
    if payload is not None:
        request.input_content = payload[:MAX_INPUT_CONTENT_BYTES]
        request.input_size_bytes = len(payload)
        request.input_content_type = labels.get("content_type", "")
        if len(payload) <= MAX_PAYLOAD_JSON_LABEL_BYTES:
            try:
                request.labels[PAYLOAD_JSON_LABEL] = payload.decode()
            except UnicodeDecodeError:
                pass
    return request


class RedisGetProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` a payload reader uses."""

    def get(self, name: str) -> Awaitable[Any]: ...


def policy_reads_payloads(config_dir: Path) -> bool:
    """Whether the policy shipped in ``config_dir`` derives risk tags from job payloads.

    Only then is a payload reader worth its Redis read per check; a policy without
    ``risk_tag_derivers`` never looks at the payload. An unreadable file says False
    (the kernel keeps its own copy; a deriver without a payload assumes high risk).
    """
    from cordum.safety.policy_file import POLICY_FILE_NAME, load_policy

    try:
        return bool(load_policy(config_dir / POLICY_FILE_NAME).document.risk_tag_derivers)
    except Exception as exc:
        log.warning("policy in %s not read (%s): safety checks go without payloads",
                    config_dir, exc)
        return False


def payload_reader_for(config_dir: Path, redis: RedisGetProtocol) -> PayloadReader | None:
    """A reader of job payloads from Redis when the policy in ``config_dir`` derives risk
    tags from them, else None: one Redis read per check, spent only where it matters."""
    return redis_payload_reader(redis) if policy_reads_payloads(config_dir) else None


def process_client(cfg: Settings, redis: Any) -> SafetyClient:
    """The input policy client as the functions wire it: the settings' kernel and
    timeout, the breaker shared through ``redis``, the shipped policy's payload reader."""
    return SafetyClient(cfg.safety_kernel_addr, cfg.safety_timeout_s,
                        breaker=CircuitBreaker(redis),
                        payload_reader=payload_reader_for(cfg.config_dir, redis))


def redis_payload_reader(redis: RedisGetProtocol) -> PayloadReader:
    """A PayloadReader on the job store's Redis (``ctx:<job id>`` keys)."""
    from cordum.protocol import key_from_pointer

    async def read(ptr: str) -> bytes | None:
        key = key_from_pointer(ptr)
        if not key:
            return None
        value = await redis.get(key)
        return value.encode() if isinstance(value, str) else value

    return read


class KernelCallError(Exception):
    """The Check RPC failed; the message is what follows "safety kernel error: "."""


class SafetyClient:
    """Checks jobs against the SafetyKernel service.

    ``breaker`` defaults to an in-process breaker; processes that share Redis pass a
    :class:`~cordum.safety.breaker.CircuitBreaker` on it so all replicas open and
    recover together. ``channel_factory`` builds the gRPC channel for an address
    (tests add interceptors through it); without one the channel follows ``tls``,
    which defaults to the ``SAFETY_KERNEL_TLS_*`` variables (a bad setting raises
    :class:`~cordum.config.ConfigError` here). ``payload_reader`` lets the kernel
    see the job's payload (see the module doc).
    """

    def __init__(
        self,
        addr: str,
        timeout_s: float = 2.0,
        *,
        breaker: Breaker | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: ClientTLS | None = None,
        payload_reader: PayloadReader | None = None,
    ) -> None:
        self._addr = addr
        self._timeout = timeout_s
        self._breaker: Breaker = breaker or CircuitBreaker(None)
        self._channel_factory = channel_factory
        if tls is None and channel_factory is None:
            tls = client_tls_from_env()
        self._tls = tls
        self._payload_reader = payload_reader
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def breaker(self) -> Breaker:
        return self._breaker

    @property
    def secure(self) -> bool:
        """True when the channel is TLS (False with a ``channel_factory``: unknown)."""
        return self._tls is not None and self._tls.secure

    async def check(self, req: JobRequest, tenant: str) -> SafetyVerdict:
        admission = await self._breaker.allow()
        if not admission.admitted:
            return SafetyVerdict(Decision.UNAVAILABLE, CIRCUIT_OPEN_REASON)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        payload = await self._read_payload(req)
        try:
            resp = await self._call_check(check_request(req, tenant, payload=payload),
                                          deadline)
        except KernelCallError as exc:
            await self._breaker.record_failure(admission)
            return SafetyVerdict(Decision.UNAVAILABLE, f"safety kernel error: {exc}")
        await self._breaker.record_success(admission)
        return verdict_from_response(resp)

    async def simulate(self, req: JobRequest, tenant: str) -> SafetyVerdict:
        """The decision ``check`` would give, from the kernel's ``Simulate``: velocity
        windows are looked at, not counted, and nothing is cached, so asking changes
        nothing. Same deadline, breaker and retry as ``check``; a failure is
        UNAVAILABLE with the kernel's error."""
        admission = await self._breaker.allow()
        if not admission.admitted:
            return SafetyVerdict(Decision.UNAVAILABLE, CIRCUIT_OPEN_REASON)
        deadline = asyncio.get_running_loop().time() + self._timeout
        payload = await self._read_payload(req)
        try:
            resp = await call_with_one_retry(
                lambda: (self._stub or self._connect()).Simulate,
                check_request(req, tenant, payload=payload), deadline,
                drop_channel=self._drop_channel, error=KernelCallError)
        except KernelCallError as exc:
            await self._breaker.record_failure(admission)
            return SafetyVerdict(Decision.UNAVAILABLE, f"safety kernel error: {exc}")
        await self._breaker.record_success(admission)
        return verdict_from_response(resp)

    async def aclose(self) -> None:
        """Close the channel (end of a service or a test)."""
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _connect(self) -> Any:
        from cordum import protocol  # noqa: F401
        from cordum.agent.v1 import safety_pb2_grpc

        if self._channel_factory is not None:
            self._channel = self._channel_factory(self._addr)
        else:
            self._channel = (self._tls or PLAINTEXT).channel(self._addr, options=CHANNEL_OPTIONS)
        self._stub = safety_pb2_grpc.SafetyKernelStub(self._channel)
        return self._stub

    def _drop_channel(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is None:
            return
        # Other checks may still be in flight on the old channel: they get the
        # rest of their deadline before it is torn down.
        task = asyncio.ensure_future(channel.close(grace=self._timeout))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _read_payload(self, req: JobRequest) -> bytes | None:
        """The job's payload, or None (no reader, no pointer, or the read failed: the
        kernel then sees no content, which a risk-tag deriver treats as high risk)."""
        if self._payload_reader is None or not req.context_ptr:
            return None
        try:
            async with asyncio.timeout(self._timeout * PAYLOAD_READ_SHARE):
                return await self._payload_reader(req.context_ptr)
        except Exception as exc:  # the store's trouble must not become the kernel's
            log.warning("safety check of %s without its payload: %r", req.job_id, exc)
            return None

    async def _call_check(self, request: Any, deadline: float) -> Any:
        return await call_with_one_retry(
            lambda: (self._stub or self._connect()).Check, request, deadline,
            drop_channel=self._drop_channel, error=KernelCallError)
