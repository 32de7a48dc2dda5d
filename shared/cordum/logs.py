"""Logging for functions and services: level from POWERTOOLS_LOG_LEVEL or LOG_LEVEL."""

from __future__ import annotations

import logging
import os


def setup() -> None:
    level = os.environ.get("POWERTOOLS_LOG_LEVEL") or os.environ.get("LOG_LEVEL") or "INFO"
    root = logging.getLogger()
    root.setLevel(level.upper())
    if not root.handlers:  # Lambda's runtime installs its own handler
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s %(message)s")
