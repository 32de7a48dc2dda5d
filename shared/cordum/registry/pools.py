"""Which pool serves which topic, as the bridge needs it (pools.yaml read through config)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cordum.config import PoolsConfig


def topic_pools(pools: PoolsConfig) -> dict[str, str]:
    """topic -> its first pool, as Cordum's snapshot maps topics."""
    return {topic: names[0] for topic, names in pools.topics.items() if names}


def pool_serves(pools: PoolsConfig, pool: str, topic: str, labels: Mapping[str, str]) -> bool:
    """Whether a job of ``topic`` with ``labels`` is one ``pool`` may take (Cordum's
    flush match): the pool serves the topic, a label names it, or the topic is
    ``job.<pool>.*``. A coarse filter: the engine routes the job for real."""
    if pool in pools.pools_for(topic):
        return True
    if pool in (labels.get("pool"), labels.get("target_pool")):
        return True
    return topic.startswith(f"job.{pool}.")
