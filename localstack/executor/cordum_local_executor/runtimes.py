"""Which interpreter and runtime folder run each Lambda runtime on this machine.

The launcher builds them and hands the map to LocalStack's process as
``CORDUM_LAMBDA_RUNTIMES`` (name -> {"python", "path"}).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from localstack.services.lambda_.invocation.runtime_executor import LambdaRuntimeException

RUNTIMES_ENV = "CORDUM_LAMBDA_RUNTIMES"


@dataclass(frozen=True)
class RuntimeSpec:
    """Where a Lambda runtime lives on this machine."""

    python: str
    """The interpreter, e.g. pyenv's python3.12."""
    path: str
    """The emulated /var/runtime: awslambdaric and boto3, installed for that interpreter."""


def configured_runtimes() -> dict[str, RuntimeSpec]:
    raw = os.environ.get(RUNTIMES_ENV, "")
    if not raw:
        return {}
    try:
        return {name: RuntimeSpec(**spec) for name, spec in json.loads(raw).items()}
    except (ValueError, TypeError) as exc:
        raise LambdaRuntimeException(f"{RUNTIMES_ENV} is not a valid runtime map: {exc}") from exc


def runtime_spec(runtime: str | None) -> RuntimeSpec:
    runtimes = configured_runtimes()
    if runtime in runtimes:
        return runtimes[runtime]
    available = ", ".join(sorted(runtimes)) or "none"
    raise LambdaRuntimeException(
        f"Runtime {runtime!r} is not supported by the cordum-local Lambda executor "
        f"(available: {available}; configured through {RUNTIMES_ENV})"
    )
