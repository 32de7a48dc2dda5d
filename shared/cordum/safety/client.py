"""SafetyKernel client used at dispatch time.

Every call has a deadline; an unreachable kernel is reported as UNAVAILABLE,
which the scheduler treats fail-closed (retry later). The channel is rebuilt
after UNAVAILABLE: a Lambda container thawed after minutes may hold a dead
socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cordum.protocol import JobRequest


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


class SafetyClient:
    def __init__(self, addr: str, timeout_s: float = 2.0) -> None:
        self._addr = addr
        self._timeout = timeout_s
        self._channel = None
        self._stub = None

    def _connect(self):  # type: ignore[no-untyped-def]
        import grpc

        from cordum import protocol  # noqa: F401
        from cordum.agent.v1 import safety_pb2_grpc

        self._channel = grpc.aio.insecure_channel(self._addr)
        self._stub = safety_pb2_grpc.SafetyKernelStub(self._channel)
        return self._stub

    async def check(self, req: JobRequest, tenant: str) -> SafetyVerdict:
        import grpc

        from cordum.agent.v1 import safety_pb2

        stub = self._stub or self._connect()
        request = safety_pb2.PolicyCheckRequest(
            job_id=req.job_id,
            topic=req.topic,
            tenant=tenant,
            priority=req.priority,
            principal_id=req.principal_id,
            labels=dict(req.labels),
            memory_id=req.memory_id,
        )
        request.budget.CopyFrom(req.budget)
        request.meta.CopyFrom(req.meta)
        try:
            resp = await stub.Check(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                self._stub = None
            return SafetyVerdict(Decision.UNAVAILABLE, f"safety kernel error: {exc.code().name}")
        except Exception as exc:
            self._stub = None
            return SafetyVerdict(Decision.UNAVAILABLE, f"safety kernel error: {exc}")
        return SafetyVerdict(
            decision=_DECISIONS.get(resp.decision, Decision.DENY),
            reason=resp.reason,
            rule_id=resp.rule_id,
            policy_snapshot=resp.policy_snapshot,
        )


_DECISIONS = {
    1: Decision.ALLOW,
    2: Decision.DENY,
    3: Decision.REQUIRE_APPROVAL,
    4: Decision.THROTTLE,
    5: Decision.ALLOW_WITH_CONSTRAINTS,
}
"""DecisionType numbers; UNSPECIFIED and anything unknown mean DENY."""
