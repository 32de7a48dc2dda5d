"""What the scheduler does when a policy check cannot be made.

Input (the kernel is UNAVAILABLE): ``closed`` (the default) retries the job later,
``open`` lets it go on labelled as having bypassed safety; POLICY_CHECK_FAIL_MODE
wins over ``input_policy.fail_mode`` in safety.yaml. Output (the content check
failed): ``closed`` (the default) quarantines, ``open`` allows;
OUTPUT_POLICY_FAIL_MODE wins over ``output_policy.fail_mode``.
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
OUTPUT_FAIL_MODE_ENV = "OUTPUT_POLICY_FAIL_MODE"


class FailMode(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


def input_fail_mode(env: Mapping[str, str] | None = None,
                    config_dir: Path | None = None) -> FailMode:
    """The input fail mode (POLICY_CHECK_FAIL_MODE over ``input_policy.fail_mode``)."""
    return fail_mode("input_policy", INPUT_FAIL_MODE_ENV, env, config_dir)


def output_fail_mode(env: Mapping[str, str] | None = None,
                     config_dir: Path | None = None) -> FailMode:
    """The output fail mode (OUTPUT_POLICY_FAIL_MODE over ``output_policy.fail_mode``)."""
    return fail_mode("output_policy", OUTPUT_FAIL_MODE_ENV, env, config_dir)


def fail_mode(section: str, env_var: str, env: Mapping[str, str] | None = None,
              config_dir: Path | None = None) -> FailMode:
    """A fail mode; read it once per process, at start.

    A value other than open/closed is a configuration error, not a silent default:
    a typo must not decide whether unchecked work goes on. A missing safety.yaml (or
    a file without the section) means closed.
    """
    env = os.environ if env is None else env
    raw = env.get(env_var, "").strip()
    if raw:
        return _parse(raw, env_var)
    path = (config_dir or load_settings(dict(env)).config_dir) / "safety.yaml"
    if not path.is_file():
        return FailMode.CLOSED
    doc = load_yaml(path)
    policy = doc.get(section) if isinstance(doc, dict) else None
    value = policy.get("fail_mode") if isinstance(policy, dict) else None
    if value is None or str(value).strip() == "":
        return FailMode.CLOSED
    return _parse(str(value), f"{path}: {section}.fail_mode")


def _parse(value: str, where: str) -> FailMode:
    try:
        return FailMode(value.strip().lower())
    except ValueError:
        raise ConfigError(f"{where}: must be open or closed, got {value!r}") from None
