"""How jobs look in API answers: Cordum's field names, RFC 3339 times (UTC)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from cordum import protocol
from cordum.store.jobs import decode_labels


def json_or_text(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"text": raw}


def rfc3339(us: str | None) -> str | None:
    if not us:
        return None
    try:
        return datetime.fromtimestamp(int(us) / 1e6, tz=UTC).isoformat().replace("+00:00", "Z")
    except ValueError:
        return None


def job_detail(job_id: str, meta: dict[str, str], result_ptr: str | None,
               result: Any) -> dict[str, Any]:
    def json_list(name: str) -> list[str]:
        try:
            value = json.loads(meta.get(name) or "[]")
        except ValueError:
            return []
        return [str(v) for v in value] if isinstance(value, list) else []

    return {
        "id": job_id,
        "state": meta.get("state", ""),
        "topic": meta.get("topic", ""),
        "tenant": meta.get("tenant", ""),
        "trace_id": meta.get("trace_id", ""),
        "updated_at": rfc3339(meta.get("updated_at")),
        "created_at": rfc3339(meta.get("created_at")),
        "context_ptr": protocol.pointer(protocol.context_key(job_id)),
        "result_ptr": result_ptr,
        "result": result if isinstance(result, dict) or result is None else {"value": result},
        "capability": meta.get("capability", ""),
        "risk_tags": json_list("risk_tags"),
        "requires": json_list("requires"),
        "labels": decode_labels(meta),
        "priority": int(meta.get("priority") or 1),
        "attempts": int(meta.get("attempts") or 0),
        "retry_count": max(0, int(meta.get("attempts") or 0) - 1),
        "worker_id": meta.get("worker_id", ""),
        "error": meta.get("failure_reason") or None,
        "safety_decision": meta.get("safety_decision", ""),
        "safety_reason": meta.get("safety_reason", ""),
        "safety_rule_id": meta.get("safety_rule_id", ""),
        "safety_snapshot": meta.get("safety_snapshot", ""),
    }
