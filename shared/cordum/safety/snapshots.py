"""The policy snapshot the safety kernel currently enforces, asked over gRPC.

An approval is bound to the policy snapshot a job was judged under; before
approving, the API asks which snapshot is in force now, so an approval does
not outlive a policy change.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class PolicySnapshots(Protocol):
    """Where the policy snapshot currently in force comes from."""

    async def current(self) -> str | None:
        """The kernel's current snapshot; None when it cannot be asked."""
        ...


class KernelSnapshots:
    """``ListSnapshots`` of the safety kernel (its first entry is the one in force).

    A channel per call: approvals are rare, and a channel kept across frozen
    Lambda invocations would have to be checked before every use anyway.
    """

    def __init__(self, addr: str, timeout_s: float) -> None:
        from cordum.safety.tls import client_tls_from_env

        self._addr = addr
        self._timeout_s = timeout_s
        self._tls = client_tls_from_env()  # the kernel's transport, as every client

    async def current(self) -> str | None:
        from cordum.agent.v1 import safety_pb2, safety_pb2_grpc

        try:
            async with self._tls.channel(self._addr) as channel:
                stub = safety_pb2_grpc.SafetyKernelStub(channel)
                resp = await stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(),
                                                timeout=self._timeout_s)
        except Exception as exc:  # unreachable, deadline, any RPC error
            log.warning("safety kernel %s: ListSnapshots failed: %s", self._addr, exc)
            return None
        snapshots = [s.strip() for s in resp.snapshots if s.strip()]
        return snapshots[0] if snapshots else None
