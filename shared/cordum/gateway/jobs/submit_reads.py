"""What a submit reads before it asks the policy: the tenant's config documents that apply
to the job (merged, its effective config, which the job carries in its env and the safety
kernel applies) and the tenant's registration of the job's topic (whose input schema the
input must satisfy).

Round trips. The documents (system, the tenant's org, the body's team) and the topic's
registration are read with one MGET that rides in the rate limiter's pipeline
(``cordum.gateway.core.http.principal_reading``): no round trip of their own, whether
documents exist or not. When that pipeline did not read them (rate limiting switched
off, Redis slow to answer it), :func:`resolve` reads them with one MGET. A topic that
names an input schema costs one GET of the schema, and the check is bounded as every
schema check is (``cordum.gateway.core.input_schemas``).

The keys are worked out from the body as sent, before it is validated: a body whose
topic or team the validation changes (a default filled in) is read again for what it
became, so what is applied is always what the job says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.input_schemas import InputSchemaMissing, check_stored, submit_value
from cordum.safety.client import EFFECTIVE_CONFIG_ENV
from cordum.store import config_docs
from cordum.store.errors import StoreError
from cordum.store.schema_registry import decode_topic, read_schema, topic_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum import protocol
    from cordum.gateway.jobs.models import SubmitJobRequest

DEFAULT_TOPIC = "job.default"


@dataclass(frozen=True, slots=True)
class Plan:
    """The keys one submit reads: its config documents in merge order, then its topic."""

    tenant: str
    topic: str
    team_id: str
    keys: tuple[str, ...]

    @property
    def config_keys(self) -> tuple[str, ...]:
        return self.keys[:-1]


def plan(tenant: str, raw: Mapping[str, Any] | None) -> Plan:
    """The keys of a submit of ``tenant`` whose body (parsed, not yet validated) is
    ``raw``; an id that cannot name a document leaves its scope out (the validation
    refuses the body or no document can exist under it)."""
    raw = raw or {}
    topic = raw.get("topic")
    topic = topic if isinstance(topic, str) and topic else DEFAULT_TOPIC
    team = raw.get("team_id")
    team = team if isinstance(team, str) else ""
    try:
        keys = config_docs.scope_keys(tenant, team)
    except config_docs.ConfigIdError:
        team = ""
        keys = config_docs.scope_keys(tenant)
    return Plan(tenant, topic, team, (*keys, topic_key(tenant, topic)))


@dataclass(frozen=True, slots=True)
class SubmitContext:
    effective: dict[str, Any] | None
    """The effective config snapshot ``{version, hash, data}``; None with no document."""
    registration: dict[str, Any] | None
    """The tenant's registration of the topic; None when it registered none."""


async def resolve(redis: Any, planned: Plan, body: SubmitJobRequest,
                  values: Sequence[Any] | None) -> SubmitContext:
    """The submit's context from the values read for ``planned`` (None: not read yet,
    one MGET here). StoreError when Redis fails."""
    if planned.topic != body.topic or planned.team_id != body.team_id:
        planned = plan(planned.tenant, {"topic": body.topic, "team_id": body.team_id})
        values = None
    if values is None:
        try:
            values = await redis.mget(list(planned.keys))
        except Exception as exc:
            raise StoreError(f"submit context of {planned.tenant!r}: {exc}") from exc
    docs, topic = list(values[:-1]), values[-1]
    return SubmitContext(config_docs.effective(docs), decode_topic(topic))


async def check_input(redis: Any, tenant: str, body: SubmitJobRequest,
                      context: SubmitContext) -> None:
    """400 ``schema_validation_failed`` naming the path when the input breaks the topic's
    input schema; 409 when the schema it names is gone. Nothing to do (no I/O) for a
    topic without one."""
    schema_id = str((context.registration or {}).get("input_schema_id") or "").strip()
    if not schema_id:
        return
    stored = await read_schema(redis, tenant, schema_id)
    if stored is None:
        raise InputSchemaMissing(schema_id)
    value, root = submit_value(body.model_dump(include={"context", "prompt", "adapter_id",
                                                        "priority", "topic"}), tenant)
    check_stored(stored, value, root=root)


def attach(req: protocol.JobRequest, context: SubmitContext) -> None:
    """Put the effective config in the job's env, where the safety kernel's client reads
    it (and a worker may); a job with no document carries none."""
    if context.effective is not None:
        req.env[EFFECTIVE_CONFIG_ENV] = json.dumps(context.effective, separators=(",", ":"),
                                                   ensure_ascii=False)
