"""The parts the OpenAPI document lists, as ``cordum.gateway.app`` publishes them.

The docs feature renders every feature's part but may import none of them (features
are independent): the app, which wires every feature, hands over a function that
loads the parts. It runs on the first document request, not at cold start: the
parts import every response model, a cost most invocations (job submits) never need.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from cordum.gateway.core.openapi import ApiPart

_source: Callable[[], Iterable[ApiPart]] | None = None


def publish(source: Callable[[], Iterable[ApiPart]]) -> None:
    """What the document lists from now on: the parts ``source`` loads, in its order."""
    global _source
    _source = source
    parts.cache_clear()


@lru_cache(maxsize=1)
def parts() -> tuple[ApiPart, ...]:
    """The published parts, loaded once per container."""
    if _source is None:
        raise RuntimeError("no API parts published: cordum.gateway.app publishes them")
    return tuple(_source())
