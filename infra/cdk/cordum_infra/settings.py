"""Deployment settings, read once from the CDK context and checked up front.

Context keys (``-c key=value`` or ``cdk.json``):

=================== ==========================================================
natsUrl             required: NATS server(s) the functions publish to
redisUrl            given: use that Redis, create no cache and no VPC (local
                    stacks; LocalStack has no ElastiCache). Absent: the stack
                    creates a VPC and an ElastiCache replication group
safetyKernelAddr    host:port of the safety kernel; defaults to 127.0.0.1:50051
                    only together with redisUrl (a local stack)
layerPath           built layer folder (holding ``python/``); default
                    ``<repo>/layers/build/cordum-layer``
configDir           folder shipped as ``config/`` with the function code;
                    default ``<repo>/config``
functionsDir        handler modules; default ``<repo>/functions``
logLevel            POWERTOOLS_LOG_LEVEL; default INFO
apiKeys             CORDUM_API_KEYS for the gateway (local dev only). Absent:
                    the gateway reads SSM parameter /cordum/api-keys
architecture        x86_64 (default) or arm64; must match the layer build
nag                 ``false`` skips the cdk-nag checks (read by app.py)
=================== ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from constructs import Node

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_LAYER_PATH = REPO_ROOT / "layers" / "build" / "cordum-layer"
DEFAULT_CONFIG_DIR = REPO_ROOT / "config"
DEFAULT_FUNCTIONS_DIR = REPO_ROOT / "functions"
DEFAULT_CODE_STAGING_DIR = REPO_ROOT / "infra" / "cdk" / "build" / "function-code"

LOCAL_SAFETY_KERNEL_ADDR = "127.0.0.1:50051"
"""Safety kernel address assumed for a local stack (one given a redisUrl)."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ARCHITECTURES = ("x86_64", "arm64")


class ContextError(ValueError):
    """A context value is missing or malformed; the message names the key."""


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack needs to know about its deployment target."""

    nats_url: str
    """NATS server URL(s), comma separated."""
    safety_kernel_addr: str
    """host:port of the safety kernel gRPC server."""
    redis_url: str | None
    """External Redis; None makes the stack create its own (ElastiCache)."""
    layer_path: Path
    """Built layer folder; its ``python/`` subfolder is the layer content."""
    config_dir: Path
    """Shipped to every function as ``config/`` next to the handlers."""
    functions_dir: Path
    """Folder holding the handler modules."""
    code_staging_dir: Path
    """Recreated at synth: handler modules + ``config/``, the function asset."""
    log_level: str = "INFO"
    """POWERTOOLS_LOG_LEVEL of every function."""
    api_keys: str | None = None
    """Literal CORDUM_API_KEYS for the gateway (local stacks only)."""
    architecture: str = "x86_64"
    """Lambda architecture of the functions and the layer."""
    output_policy: bool = True
    """OUTPUT_POLICY_ENABLED of the functions: SUCCEEDED results are checked against
    the safety kernel's output_rules (Cordum's default is off; governed output is
    what this stack is for, so it is on unless the context says ``false``)."""

    @property
    def creates_cache(self) -> bool:
        """True when the stack brings its own Redis (and so a VPC)."""
        return self.redis_url is None

    @classmethod
    def from_context(cls, node: Node, **overrides: object) -> StackSettings:
        """Read and check the context; keyword arguments win over it."""

        def get(key: str) -> str | None:
            value = node.try_get_context(key)
            if value is None:
                return None
            text = str(value).strip()
            return text or None

        redis_url = get("redisUrl")
        if redis_url is not None and not redis_url.startswith(("redis://", "rediss://")):
            raise ContextError(
                f"context redisUrl must start with redis:// or rediss://: {redis_url}"
            )

        nats_url = get("natsUrl")
        if nats_url is None:
            raise ContextError(
                "context natsUrl is required: the NATS server(s) the functions publish to, "
                "e.g. -c natsUrl=nats://127.0.0.1:4222"
            )
        if not all(u.strip().startswith(("nats://", "tls://")) for u in nats_url.split(",")):
            raise ContextError(f"context natsUrl must be nats:// or tls:// URL(s): {nats_url}")

        safety = get("safetyKernelAddr")
        if safety is None:
            if redis_url is None:
                raise ContextError(
                    "context safetyKernelAddr is required when the stack creates its own Redis "
                    "(no redisUrl): host:port of the safety kernel the functions can reach"
                )
            safety = LOCAL_SAFETY_KERNEL_ADDR

        log_level = (get("logLevel") or "INFO").upper()
        if log_level not in LOG_LEVELS:
            raise ContextError(f"context logLevel must be one of {', '.join(LOG_LEVELS)}")

        architecture = get("architecture") or "x86_64"
        if architecture not in ARCHITECTURES:
            raise ContextError(f"context architecture must be one of {', '.join(ARCHITECTURES)}")

        output_policy = (get("outputPolicy") or "true").lower()
        if output_policy not in ("true", "false"):
            raise ContextError(f"context outputPolicy must be true or false: {output_policy}")

        layer_path = Path(get("layerPath") or DEFAULT_LAYER_PATH).expanduser().resolve()
        if not (layer_path / "python").is_dir():
            raise ContextError(
                f"build the layer first: python layers/build.py (no python/ folder in {layer_path})"
            )

        config_dir = Path(get("configDir") or DEFAULT_CONFIG_DIR).expanduser().resolve()
        if not config_dir.is_dir():
            raise ContextError(f"context configDir: no such folder: {config_dir}")

        functions_dir = Path(get("functionsDir") or DEFAULT_FUNCTIONS_DIR).expanduser().resolve()
        if not functions_dir.is_dir():
            raise ContextError(f"context functionsDir: no such folder: {functions_dir}")

        values: dict[str, object] = {
            "nats_url": nats_url,
            "safety_kernel_addr": safety,
            "redis_url": redis_url,
            "layer_path": layer_path,
            "config_dir": config_dir,
            "functions_dir": functions_dir,
            "code_staging_dir": DEFAULT_CODE_STAGING_DIR,
            "log_level": log_level,
            "api_keys": get("apiKeys"),
            "architecture": architecture,
            "output_policy": output_policy == "true",
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
