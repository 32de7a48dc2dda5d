"""What the engine reads from a queue record, and what it says became of it."""

from __future__ import annotations

from dataclasses import dataclass

from cordum import protocol
from cordum.scheduler.errors import UnparseableRecord


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a packet, for logs and tests."""

    job_id: str
    action: str
    state: str = ""
    detail: str = ""


def decode(data: bytes, kinds: str | tuple[str, ...]) -> protocol.BusPacket:
    """The packet in ``data``, which must carry one of ``kinds``; else
    :class:`UnparseableRecord` (no redelivery can make it processable)."""
    try:
        decoded = protocol.decode(data)
    except protocol.InvalidPacket as exc:
        raise UnparseableRecord(str(exc)) from exc
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    if decoded.kind not in kinds:
        raise UnparseableRecord(f"expected a {' or '.join(kinds)} packet, got {decoded.kind}")
    return decoded.packet


def tenant_of(req: protocol.JobRequest) -> str:
    """Cordum's ExtractTenant: ``tenant_id``, else ``env["tenant_id"]``, else "default"."""
    return req.tenant_id or req.env.get("tenant_id", "") or "default"
