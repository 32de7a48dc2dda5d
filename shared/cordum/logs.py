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


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_level(value: str) -> str:
    """A logging level name, upper-cased; ValueError names the accepted ones."""
    level = value.strip().upper()
    if level not in LEVELS:
        raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return level
