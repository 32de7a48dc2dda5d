"""The schema registry and the topic registry on Redis: keys, limits and reads.

Both are per tenant. Keys (the tenant escaped so that a key splits one way only: a
tenant cannot hold a ``:`` or a bare ``%``, so tenant ``a:b`` never reaches ``a``'s
entries):

- ``schema:def:<tenant>:<id>`` STRING, JSON ``{id, schema, sha256, updated_at,
  updated_by}``: one registered JSON Schema. ``sha256`` is the hex digest of the
  schema's canonical JSON (:func:`schema_digest`): what compiled validators are cached
  by, so a reader never hashes the schema again.
- ``schema:index:<tenant>`` ZSET, every score 0: the tenant's schema ids, read in id
  order (ZRANGEBYLEX) for the list and counted (ZCARD) for the limit.
- ``schema:users:<tenant>:<id>`` SET of the topic names whose ``input_schema_id`` or
  ``output_schema_id`` names the schema: a schema in use is not deleted.
- ``topic:def:<tenant>:<name>`` STRING, JSON: one topic registration (Cordum's
  ``Registration`` fields with ``tenant_id``). A submit reads it with one GET
  (:func:`read_topic`).
- ``topic:index:<tenant>`` ZSET, every score 0: the tenant's topic names.

Reads here are one round trip each, bounded by the client's timeout; a failure is a
:class:`~cordum.store.errors.StoreError`. The writes (with their audit events) are the
gateway feature's, in WATCH/MULTI transactions over these keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from cordum.store.errors import StoreError
from cordum.store.json_docs import json_object

MAX_SCHEMA_BYTES = 64 * 1024
"""A schema's canonical JSON (:func:`canonical`) is at most this many bytes of UTF-8."""
MAX_SCHEMAS = 1000
"""Schemas one tenant may hold."""
MAX_TOPICS = 1000
"""Topics one tenant may register."""
MAX_ID_CHARS = 128
SCHEMA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]*$")
"""A schema id: a single path segment (letters, digits, ``.``, ``_``, ``~``, ``-``)."""
TOPIC_NAME = re.compile(r"^job\.[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
"""The names a submit accepts as its topic (the jobs feature's rule): a registration
no submit could name would govern nothing."""
MAX_TOPIC_CHARS = 256


def _tenant(tenant: str) -> str:
    if not tenant:
        raise ValueError("a registry key needs a tenant")
    return tenant.replace("%", "%25").replace(":", "%3A")


def schema_key(tenant: str, schema_id: str) -> str:
    """``schema:def:<tenant>:<id>``: one schema of one tenant."""
    return f"schema:def:{_tenant(tenant)}:{schema_id}"


def schema_index_key(tenant: str) -> str:
    return f"schema:index:{_tenant(tenant)}"


def schema_users_key(tenant: str, schema_id: str) -> str:
    return f"schema:users:{_tenant(tenant)}:{schema_id}"


def topic_key(tenant: str, topic: str) -> str:
    """``topic:def:<tenant>:<name>``: one topic registration of one tenant."""
    return f"topic:def:{_tenant(tenant)}:{topic}"


def topic_index_key(tenant: str) -> str:
    return f"topic:index:{_tenant(tenant)}"


def schema_id_problem(schema_id: str) -> str:
    """Why ``schema_id`` cannot name a schema, or ""."""
    if not schema_id.strip():
        return "schema id required"
    if len(schema_id) > MAX_ID_CHARS:
        return f"schema id is longer than {MAX_ID_CHARS} characters"
    if not SCHEMA_ID.match(schema_id):
        return ("schema id must start with a letter or digit and hold only letters, "
                "digits, '.', '_', '~' and '-'")
    return ""


def topic_name_problem(name: str) -> str:
    """Why ``name`` cannot name a topic, or ""."""
    if not name:
        return "topic name must not be empty"
    if len(name) > MAX_TOPIC_CHARS:
        return f"topic name is longer than {MAX_TOPIC_CHARS} characters"
    if not TOPIC_NAME.match(name):
        return f"topic must match job.* pattern: {name[:80]!r}"
    return ""


def canonical(schema: Any) -> str:
    """The schema's canonical JSON: compact, keys sorted, UTF-8 kept (what the size
    limit counts and the digest hashes). ValueError when it is no JSON document."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def schema_digest(text: str) -> str:
    """SHA-256 hex of a canonical JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredSchema:
    id: str
    schema: dict[str, Any]
    sha256: str
    updated_at: str = ""
    updated_by: str = ""

    def record(self) -> dict[str, Any]:
        """What GET /api/v1/schemas/{id} answers (the SDK's ``SchemaRecord`` and extras)."""
        out: dict[str, Any] = {"id": self.id, "schema": self.schema, "sha256": self.sha256}
        if self.updated_at:
            out["updated_at"] = self.updated_at
        return out

    def encode(self) -> str:
        return json.dumps({"id": self.id, "schema": self.schema, "sha256": self.sha256,
                           "updated_at": self.updated_at, "updated_by": self.updated_by},
                          separators=(",", ":"), ensure_ascii=False)


def decode_schema(raw: Any) -> StoredSchema | None:
    """A stored schema; None when absent or malformed (the digest is recomputed when
    the stored one is missing)."""
    doc = json_object(raw)
    if doc is None or not isinstance(doc.get("schema"), dict) or not isinstance(
            doc.get("id"), str):
        return None
    digest = doc.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64:
        digest = schema_digest(canonical(doc["schema"]))
    return StoredSchema(id=doc["id"], schema=doc["schema"], sha256=digest,
                        updated_at=str(doc.get("updated_at") or ""),
                        updated_by=str(doc.get("updated_by") or ""))


def decode_topic(raw: Any) -> dict[str, Any] | None:
    """A stored topic registration; None when absent or malformed."""
    doc = json_object(raw)
    if doc is None or not isinstance(doc.get("name"), str):
        return None
    return doc


async def read_schema(redis: Any, tenant: str, schema_id: str) -> StoredSchema | None:
    """The tenant's schema ``schema_id`` (None when it has none): one GET."""
    try:
        raw = await redis.get(schema_key(tenant, schema_id))
    except Exception as exc:
        raise StoreError(f"schema {schema_id!r} of {tenant!r}: {exc}") from exc
    return decode_schema(raw)


async def read_topic(redis: Any, tenant: str, topic: str) -> dict[str, Any] | None:
    """The tenant's registration of ``topic`` (None when it has none): one GET."""
    try:
        raw = await redis.get(topic_key(tenant, topic))
    except Exception as exc:
        raise StoreError(f"topic {topic!r} of {tenant!r}: {exc}") from exc
    return decode_topic(raw)
