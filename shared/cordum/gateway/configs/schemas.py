"""Response bodies of the config routes (the conventions of
``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any

from cordum.gateway.core.schemas import Body, optional


class EffectiveConfig(Body):
    """The merged config of the scopes that apply (cordum-sdk reads it as a
    ConfigDocument: ``data`` is the merged config)."""

    version: str = optional()
    """Each scope's revision: ``system:3|org:1|team:0|workflow:0|step:0``."""
    hash: str = optional()
    """SHA-256 hex of ``data`` as compact JSON with sorted keys."""
    data: dict[str, Any] = optional()
