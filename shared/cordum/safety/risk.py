"""Risk tags the kernel derives itself from the job's payload (``risk_tag_derivers``).

Rules match on risk tags (``match.risk_tags``), and a client declares them in
``JobMetadata.risk_tags``. A client that leaves out ``high_value`` on a large
transfer would slip past a rule meant for it, so for the topics a deriver covers the
kernel does not trust the declared tags: it REPLACES them with tags derived from the
payload. Other topics keep the client's tags.

safety.yaml::

    risk_tag_derivers:
      - topics: [job.bank.transfer, "job.bank.payout.*"]  # globs; the first deriver
                                                          # with a matching glob applies
        amount_field: amount        # key of the payload's JSON object, dotted for a
                                    # nested one (transfer.amount); default: amount
        base_tags: [finance]        # added to every job of these topics
        amount_thresholds:          # ascending by `below`
          - {below: 1000, tag: standard}
          - {tag: high_value}       # only the last may omit `below`: no upper bound

The first threshold whose ``below`` exceeds the amount gives the tag; at or above all
of them the last entry's tag applies. So with the example an amount of 999.99 is
``[finance, standard]`` and 1000 or more is ``[finance, high_value]``.

Where the amount is read, first found wins: the request's ``input_content`` (the
payload behind ``context_ptr``, which :class:`~cordum.safety.client.SafetyClient`
sends when it has a payload reader), then label ``_content.payload_json``, then label
``_content.prompt``; each must hold a JSON object. The value may be a number or a
numeric string. Ordinary job labels (a label ``amount``) are never read: the worker
does not act on them, so they could say anything.

An amount that is missing, not a number, not finite, or <= 0 gets the LAST (highest
risk) tag: a payload the kernel cannot read is never treated as the cheap case.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from cordum.safety.content_labels import PAYLOAD_JSON_LABEL, PROMPT_LABEL
from cordum.safety.fields import StrictModel, StrList, first_glob

if TYPE_CHECKING:
    from collections.abc import Mapping



class AmountThreshold(StrictModel):
    tag: str = Field(min_length=1)
    below: float | None = None
    """The tag applies to amounts below this; omitted on the last entry (no bound)."""


class RiskTagDeriver(StrictModel):
    """One ``risk_tag_derivers`` entry: amount thresholds for some topics."""

    topics: StrList = Field(min_length=1)
    amount_thresholds: list[AmountThreshold] = Field(min_length=1)
    amount_field: str = "amount"
    """Key of the payload's JSON object holding the amount; ``a.b`` for a nested one."""
    base_tags: StrList = Field(default_factory=list)

    @field_validator("amount_thresholds")
    @classmethod
    def _ascending(cls, v: list[AmountThreshold]) -> list[AmountThreshold]:
        bounds = [t.below for t in v]
        if any(b is None for b in bounds[:-1]):
            raise ValueError("only the last threshold may omit 'below'")
        finite = [b for b in bounds if b is not None]
        if finite != sorted(finite):
            raise ValueError("thresholds must be in ascending order of 'below'")
        return v

    @field_validator("amount_field")
    @classmethod
    def _path(cls, v: str) -> str:
        if not all(part.strip() for part in v.split(".")):
            raise ValueError("must be a key or a dotted path of keys")
        return v.strip()

    def applies_to(self, topic: str) -> bool:
        return first_glob(self.topics, topic) is not None

    def derive(self, labels: Mapping[str, str], content: bytes) -> tuple[str, ...]:
        amount = extract_amount(labels, content, self.amount_field)
        tag = self.amount_thresholds[-1].tag
        if amount is not None and amount > 0:
            for threshold in self.amount_thresholds:
                if threshold.below is not None and amount < threshold.below:
                    tag = threshold.tag
                    break
        return (*self.base_tags, tag)


def derive_risk_tags(derivers: list[RiskTagDeriver], topic: str, labels: Mapping[str, str],
                     content: bytes, declared: tuple[str, ...]) -> tuple[str, ...]:
    """The risk tags rules see: derived by the first deriver for ``topic``, else
    the client's ``declared`` ones."""
    for deriver in derivers:
        if deriver.applies_to(topic):
            return deriver.derive(labels, content)
    return declared


def extract_amount(labels: Mapping[str, str], content: bytes,
                   field: str = "amount") -> float | None:
    """The amount at ``field`` of the first JSON object found (see the module doc)."""
    for source in (content, labels.get(PAYLOAD_JSON_LABEL, "").encode(),
                   labels.get(PROMPT_LABEL, "").encode()):
        if source:
            amount = _amount_in(source, field)
            if amount is not None:
                return amount
    return None


def _amount_in(data: bytes, field: str) -> float | None:
    try:
        node: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    for part in field.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if isinstance(node, bool) or node is None:
        return None
    if isinstance(node, int | float):
        value = float(node)
    elif isinstance(node, str):
        try:
            value = float(node.strip())
        except ValueError:
            return None
    else:
        return None
    return value if math.isfinite(value) else None
