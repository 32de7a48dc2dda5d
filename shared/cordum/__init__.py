"""Cordum Serverless: the Cordum control plane for AI-agent jobs on AWS-compatible services."""

import os
import sys
import types

__version__ = "0.1.0"

PLUGINS_OFF = ("__all__", "1", "true")
"""The values of pydantic's ``PYDANTIC_DISABLE_PLUGINS`` that turn every plugin off."""


def _no_plugin_discovery() -> None:
    """With pydantic's plugins all turned off (``PYDANTIC_DISABLE_PLUGINS``, which the CDK
    app sets on every function), its plugin loader finds none, as ours does, but the
    real one first imports ``importlib.metadata`` (with its email and zip parsing) to
    look: about 15 ms of each function's cold start. Ours stands in for it before the
    first model is built; it answers as the real one does then (no plugins). The
    pydantic release is pinned (layers/requirements.txt); tests/unit/test_plugin_loader.py
    checks that the loader is still where this expects it."""
    name = "pydantic.plugin._loader"
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in PLUGINS_OFF or name in sys.modules:
        return
    def get_plugins() -> tuple[()]:
        return ()

    loader = types.ModuleType(name, "pydantic's plugin loader with every plugin off")
    loader.get_plugins = get_plugins  # type: ignore[attr-defined]
    sys.modules[name] = loader


_no_plugin_discovery()
