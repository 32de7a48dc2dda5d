"""The effective config sent with a check (``PolicyCheckRequest.effective_config``),
applied after the policy as Cordum's kernel applies it: it can only restrict.

The config is JSON: the merged config itself, or its snapshot ``{version, hash,
data}``; the kernel reads ``safety`` at the top, else ``data.safety``. Of that section:

- a topic matching one of ``denied_topics`` is denied, reason ``topic '<t>' denied by
  effective config``;
- with a non-empty ``allowed_topics``, a topic matching none is denied, reason ``topic
  '<t>' not allowed by effective config`` (this reason wins when both apply, as in
  Cordum, where the allow check runs second).

Patterns are globs matched as the policy's topic lists are
(:func:`cordum.safety.fields.first_glob`). Such a deny names rule
:data:`EFFECTIVE_CONFIG_RULE` and replaces whatever the policy decided, an approval or
constraints included.

What is not read is not applied, as in Cordum: a config that is not JSON, larger than
:data:`MAX_EFFECTIVE_CONFIG_BYTES`, nested too deeply, or whose topic lists are not
lists of strings, restricts nothing (logged at warning). The gateway's config service
writes only configs this module reads, and bounds each document to 64 KiB, so the
merge of five stays under the bound.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from cordum.safety.fields import first_glob

log = logging.getLogger("cordum.safety.kernel")

EFFECTIVE_CONFIG_RULE = "effective-config"
"""The ``rule_id`` of a deny the effective config made."""
MAX_EFFECTIVE_CONFIG_BYTES = 1024 * 1024
"""Larger configs are not parsed. Five documents of at most 64 KiB of UTF-8 JSON each
are less however they are written: escaped as ASCII (``\\u00e9``), a character takes at
most three times its UTF-8 bytes."""


@dataclass(frozen=True, slots=True)
class TopicLists:
    denied: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()


def _topics(section: dict[str, Any], name: str) -> tuple[str, ...] | None:
    value = section.get(name)
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _lists(section: Any) -> TopicLists | None:
    if not isinstance(section, dict):
        return None
    denied, allowed = _topics(section, "denied_topics"), _topics(section, "allowed_topics")
    if denied is None or allowed is None:
        return None
    return TopicLists(denied, allowed)


def parse_safety(payload: bytes) -> TopicLists | None:
    """The topic lists of ``payload``'s ``safety`` (or ``data.safety``) section; None when
    there is none that can be read (see the module)."""
    if not payload:
        return None
    if len(payload) > MAX_EFFECTIVE_CONFIG_BYTES:
        log.warning("effective config of %d bytes not read (more than %d)", len(payload),
                    MAX_EFFECTIVE_CONFIG_BYTES)
        return None
    try:
        top = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        log.warning("effective config not read: %s", type(exc).__name__)
        return None
    if not isinstance(top, dict):
        return None
    found = _lists(top.get("safety")) if "safety" in top else None
    if found is None and isinstance(top.get("data"), dict) and "safety" in top["data"]:
        found = _lists(top["data"]["safety"])
    return found


def restriction(payload: bytes, topic: str) -> str | None:
    """The reason ``topic`` is denied by the effective config ``payload``; None when it
    is not (or there is none)."""
    lists = parse_safety(payload)
    if lists is None or not topic:
        return None
    reason = None
    if first_glob(list(lists.denied), topic) is not None:
        reason = f"topic '{topic}' denied by effective config"
    if lists.allowed and first_glob(list(lists.allowed), topic) is None:
        reason = f"topic '{topic}' not allowed by effective config"
    return reason
