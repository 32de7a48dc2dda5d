"""What the scheduler does when the input policy check is UNAVAILABLE.

``closed`` (the default): the job waits and is retried. ``open``: the job goes on as
if allowed, labelled as having bypassed safety. Environment variable
``POLICY_CHECK_FAIL_MODE`` wins over ``input_policy.fail_mode`` in safety.yaml.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import TYPE_CHECKING

from cordum.config import ConfigError, load_settings, load_yaml

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

INPUT_FAIL_MODE_ENV = "POLICY_CHECK_FAIL_MODE"


class FailMode(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


def input_fail_mode(env: Mapping[str, str] | None = None,
                    config_dir: Path | None = None) -> FailMode:
    """The input fail mode; read it once per process, at start.

    A value other than open/closed is a configuration error, not a silent default:
    a typo must not decide whether unchecked jobs run. A missing safety.yaml (or a
    file without ``input_policy``) means closed.
    """
    env = os.environ if env is None else env
    raw = env.get(INPUT_FAIL_MODE_ENV, "").strip()
    if raw:
        return _parse(raw, INPUT_FAIL_MODE_ENV)
    path = (config_dir or load_settings(dict(env)).config_dir) / "safety.yaml"
    if not path.is_file():
        return FailMode.CLOSED
    doc = load_yaml(path)
    policy = doc.get("input_policy") if isinstance(doc, dict) else None
    value = policy.get("fail_mode") if isinstance(policy, dict) else None
    if value is None or str(value).strip() == "":
        return FailMode.CLOSED
    return _parse(str(value), f"{path}: input_policy.fail_mode")


def _parse(value: str, where: str) -> FailMode:
    try:
        return FailMode(value.strip().lower())
    except ValueError:
        raise ConfigError(f"{where}: must be open or closed, got {value!r}") from None
