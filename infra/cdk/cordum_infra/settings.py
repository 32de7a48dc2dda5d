"""Deployment settings, read once from the CDK context and checked up front.

Context keys (``-c key=value`` or ``cdk.json``):

=================== ==========================================================
natsUrl             NATS server(s) the functions and the bridge connect to;
                    required unless natsCluster or devNats is true. On AWS
                    (no redisUrl) ``tls://`` only, with
                    natsCredentialsSecretArn; a local stack may use nats://
natsCredentialsSecretArn
                    complete ARN of a Secrets Manager secret holding the
                    credentials of an existing NATS cluster (``.creds`` text,
                    or JSON ``{"username", "password"}``; no redisUrl only):
                    the functions and the bridge get NATS_CREDS_SECRET_ARN and
                    may read it
natsCa              PEM file of the CA an existing cluster's certificate chains
                    to (read at synth); its clients then trust that CA alone
                    (NATS_TLS_CA). Absent: the system trust store
natsCluster         ``true`` (no redisUrl only): the stack runs a three-node
                    NATS JetStream cluster on Fargate (cordum_infra.nats_cluster:
                    TLS, a generated password, EFS stores kept on delete) and
                    natsUrl becomes its three Cloud Map names
devNats             ``true`` (no redisUrl only): the same server as one node,
                    its store deleted with the stack, for development accounts
redisUrl            given: use that Redis, create no cache and no VPC (local
                    stacks; LocalStack has no ElastiCache). Absent: the stack
                    creates a VPC and an ElastiCache replication group
safetyKernelAddr    host:port of the safety kernel. Absent: 127.0.0.1:50051
                    with redisUrl (a local stack); without redisUrl the stack
                    runs the kernel on Fargate behind an internal load
                    balancer, serving TLS with a certificate the stack issues
                    at deploy time. Given without redisUrl: that kernel, none
                    is run
safetyKernelCa      PEM file of the CA that signed the kernel's certificate
                    (read at synth; a CA certificate is no secret). Required
                    with safetyKernelAddr on AWS, where every client refuses
                    plaintext; optional on a local stack (its clients then
                    speak TLS to the kernel)
kernelTlsGeneration change it to issue the stack's kernel a new certificate
                    from the stack's CA, which stays (cordum_infra.kernel_tls);
                    default 1
natsTlsGeneration   the same for the certificate of the stack's own NATS nodes
layerPath           built layer folder (holding ``python/``); default
                    ``<repo>/layers/build/cordum-layer``
configDir           folder shipped as ``config/`` with the function code;
                    default ``<repo>/config``. On AWS its ``safety.yaml`` is
                    also the kernel's policy, copied into the stack's policy
                    bucket (cordum_infra.kernel_policy)
functionsDir        handler modules; default ``<repo>/functions``
logLevel            POWERTOOLS_LOG_LEVEL; default INFO
apiKeys             CORDUM_API_KEYS for the gateway, written into the template:
                    local stacks (redisUrl) only, refused on AWS, where the
                    gateway reads the Secrets Manager secret apiKeysSecret
apiKeysSecret       name or complete ARN of that secret (the operator creates
                    it); default cordum/api-keys (cordum_infra.api)
architecture        x86_64 (default) or arm64; must match the layer build
egress              how the VPC's private subnets reach AWS APIs (no redisUrl
                    only): ``endpoints`` (default; isolated subnets and VPC
                    endpoints, NATS must be reachable inside the VPC) or
                    ``nat`` (one NAT gateway; an outside NATS is reachable)
cacheEngine         ``redis`` (default, Redis OSS 7.1) or ``valkey`` (Valkey 8.0) for
                    the stack's ElastiCache (no redisUrl only)
cacheNodeType       its node type; default cache.t4g.small (docs/deploy-sizing.md)
streamCertificateArn
                    ARN of an ACM certificate in the stack's region (no redisUrl
                    only): the stack runs the live event stream (cordum_infra.stream)
                    behind an internet-facing HTTPS load balancer with it. Absent:
                    no stream (a warning at synth); clients poll the REST API
streamDomain        the name clients dial, one the certificate covers, mapped by the
                    operator to the load balancer (output StreamUrl uses it);
                    needs streamCertificateArn. Absent: the load balancer's name
jobRetentionSeconds how long a terminal job stays in Redis (CORDUM_JOB_RETENTION_S
                    of the functions); default 259200 (3 days)
account, region, vpcId, subnetIds, vpcCidr, availabilityZones
                    where the AWS stack's network goes (no redisUrl only):
                    cordum_infra/network_settings.py describes them
nag                 ``false`` skips the cdk-nag checks (read by app.py)
=================== ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cordum_infra.cache_config import CacheConfig, cache_config
from cordum_infra.context_values import (
    SECRET_ARN,
    ContextError,
    ca_file,
    check_outside_nats,
    stream_context,
)
from cordum_infra.network_settings import NetworkSettings, read_network_settings

if TYPE_CHECKING:
    from constructs import Node

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_LAYER_PATH = REPO_ROOT / "layers" / "build" / "cordum-layer"
DEFAULT_CONFIG_DIR = REPO_ROOT / "config"
DEFAULT_FUNCTIONS_DIR = REPO_ROOT / "functions"
DEFAULT_CODE_STAGING_DIR = REPO_ROOT / "infra" / "cdk" / "build" / "function-code"

LOCAL_SAFETY_KERNEL_ADDR = "127.0.0.1:50051"
"""Safety kernel address assumed for a local stack (one given a redisUrl)."""

API_KEYS_SECRET = "cordum/api-keys"
"""Default name of the Secrets Manager secret holding CORDUM_API_KEYS on AWS
(context apiKeysSecret names another). Created by the operator, not by the stack,
so the keys never pass through a template."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ARCHITECTURES = ("x86_64", "arm64")
EGRESS_ENDPOINTS = "endpoints"
EGRESS_NAT = "nat"
EGRESS_MODES = (EGRESS_ENDPOINTS, EGRESS_NAT)

NATS_NAMESPACE = "cordum.internal"
"""Cloud Map private DNS namespace of the stack's own NATS nodes."""
NATS_PORT = 4222
NATS_CLUSTER_NODES = 3
"""natsCluster=true: three nodes, the smallest JetStream cluster that keeps a
quorum (two) with one node lost."""
DEV_NATS_NODES = 1


def nats_node_name(index: int) -> str:
    """Cloud Map service name (and server name) of node `index`: nats-0, nats-1, ..."""
    return f"nats-{index}"


def own_nats_url(nodes: int) -> str:
    """natsUrl of a stack that runs `nodes` NATS nodes itself: TLS to every node's name."""
    return ",".join(
        f"tls://{nats_node_name(i)}.{NATS_NAMESPACE}:{NATS_PORT}" for i in range(nodes)
    )


CLUSTER_NATS_URL = own_nats_url(NATS_CLUSTER_NODES)
DEV_NATS_URL = own_nats_url(DEV_NATS_NODES)
"""natsUrl of a stack with natsCluster=true / devNats=true (cordum_infra.nats_cluster
registers the names)."""
@dataclass(frozen=True)
class StackSettings:
    """Everything the stack needs to know about its deployment target."""

    nats_url: str
    """NATS server URL(s), comma separated."""
    safety_kernel_addr: str | None
    """host:port of the safety kernel gRPC server; None: the stack runs it."""
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
    safety_kernel_ca: str | None = None
    """PEM of the CA of an outside kernel (``safety_kernel_addr``); the stack's own
    kernel gets its CA from the certificate the stack issues."""
    architecture: str = "x86_64"
    """Lambda architecture of the functions and the layer."""
    egress: str = EGRESS_ENDPOINTS
    """How the stack's VPC reaches AWS APIs: VPC endpoints or a NAT gateway."""
    nats_credentials_secret_arn: str | None = None
    """Secret with the NATS credentials of an existing cluster (AWS stacks only)."""
    nats_ca: str | None = None
    """PEM of the CA an existing cluster's certificate chains to (``natsCa``)."""
    dev_nats: bool = False
    """The stack runs a single-node NATS for development (``nats_url`` is its name)."""
    nats_cluster: bool = False
    """The stack runs a three-node NATS JetStream cluster (``nats_url`` names all three)."""
    output_policy: bool = True
    """OUTPUT_POLICY_ENABLED of the functions: SUCCEEDED results are checked against
    the safety kernel's output_rules (Cordum's default is off; governed output is
    what this stack is for, so it is on unless the context says ``false``)."""
    cache: CacheConfig = CacheConfig()
    """Engine and node type of the stack's ElastiCache, and the terminal-job retention."""
    network: NetworkSettings = NetworkSettings()
    """Existing VPC and subnets, or the block and zones of the VPC the stack creates."""
    stream_certificate_arn: str | None = None
    """ACM certificate of the live event stream's HTTPS listener; None: no stream."""
    stream_domain: str | None = None
    """The name stream clients dial (one the certificate covers); None: the load
    balancer's own name."""

    def __post_init__(self) -> None:
        # Checked here, not only in from_context, so that no override or direct
        # construction can put keys into an AWS template or leave its clients in
        # plaintext.
        aws = self.redis_url is None
        if aws and self.api_keys is not None:
            raise ContextError(
                "context apiKeys writes the keys into the template: it is for local "
                "stacks (redisUrl) only. On AWS put CORDUM_API_KEYS in the Secrets "
                f"Manager secret {API_KEYS_SECRET} (or the one context apiKeysSecret "
                "names; the gateway reads it there) and deploy without apiKeys"
            )
        if aws and self.safety_kernel_addr is not None and self.safety_kernel_ca is None:
            raise ContextError(
                "context safetyKernelCa is required with safetyKernelAddr on AWS (no "
                "redisUrl): the PEM file of the CA that signed the kernel's certificate. "
                "The functions and the bridge reach the kernel over TLS only"
            )
        if aws and self.safety_kernel_addr is None and self.safety_kernel_ca is not None:
            raise ContextError(
                "context safetyKernelCa names the CA of a kernel given by safetyKernelAddr; "
                "the stack's own kernel uses the certificate the stack issues"
            )
        if aws and not self.nats_nodes:
            check_outside_nats(self.nats_url, self.nats_credentials_secret_arn)
        if not aws and self.stream_certificate_arn is not None:
            raise ContextError(
                "context streamCertificateArn puts the live event stream behind a load "
                "balancer on AWS: it needs an AWS stack (no redisUrl); the local stack runs "
                "the stream under its supervisor"
            )
        if self.stream_domain is not None and self.stream_certificate_arn is None:
            raise ContextError(
                "context streamDomain names the stream's HTTPS endpoint: give "
                "streamCertificateArn (a certificate for that name) with it"
            )

    @property
    def nats_nodes(self) -> int:
        """NATS nodes the stack runs itself: 3 (natsCluster), 1 (devNats) or 0."""
        if self.nats_cluster:
            return NATS_CLUSTER_NODES
        return DEV_NATS_NODES if self.dev_nats else 0

    @property
    def creates_cache(self) -> bool:
        """True when the stack brings its own Redis (and so a VPC)."""
        return self.redis_url is None

    @property
    def runs_safety_kernel(self) -> bool:
        """True when the stack runs the safety kernel itself (AWS, no address given)."""
        return self.creates_cache and self.safety_kernel_addr is None

    @property
    def runs_stream(self) -> bool:
        """True when the stack runs the live event stream (AWS, with a certificate)."""
        return self.creates_cache and self.stream_certificate_arn is not None

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

        dev_nats = (get("devNats") or "false").lower()
        if dev_nats not in ("true", "false"):
            raise ContextError(f"context devNats must be true or false: {dev_nats}")
        nats_cluster = (get("natsCluster") or "false").lower()
        if nats_cluster not in ("true", "false"):
            raise ContextError(f"context natsCluster must be true or false: {nats_cluster}")
        nats_creds = get("natsCredentialsSecretArn")
        nats_url = get("natsUrl")
        if dev_nats == "true" and nats_cluster == "true":
            raise ContextError(
                "context devNats and natsCluster both ask the stack to run NATS: give "
                "natsCluster=true (three nodes) or devNats=true (one), not both"
            )
        own = [("devNats", DEV_NATS_URL, dev_nats), ("natsCluster", CLUSTER_NATS_URL, nats_cluster)]
        for key, own_url, _ in (entry for entry in own if entry[2] == "true"):
            if redis_url is not None:
                raise ContextError(
                    f"context {key} runs NATS on Fargate in the stack's VPC: it needs an AWS "
                    "stack (no redisUrl)"
                )
            if nats_url not in (None, own_url) or nats_creds is not None or get("natsCa"):
                raise ContextError(
                    f"context {key}=true runs the stack's own NATS at {own_url} with "
                    "credentials and a CA it generates: give no other natsUrl, no "
                    "natsCredentialsSecretArn and no natsCa with it"
                )
            nats_url = own_url
        if nats_url is None:
            raise ContextError(
                "context natsUrl is required: the NATS server(s) the functions publish to, "
                "e.g. -c natsUrl=nats://127.0.0.1:4222 on a local stack; on AWS "
                "-c natsCluster=true, or tls:// URL(s) with natsCredentialsSecretArn"
            )
        if not all(u.strip().startswith(("nats://", "tls://")) for u in nats_url.split(",")):
            raise ContextError(f"context natsUrl must be nats:// or tls:// URL(s): {nats_url}")
        if nats_creds is not None:
            if redis_url is not None:
                raise ContextError(
                    "context natsCredentialsSecretArn is read from Secrets Manager on AWS: "
                    "it needs an AWS stack (no redisUrl)"
                )
            if not SECRET_ARN.match(nats_creds):
                raise ContextError(
                    "context natsCredentialsSecretArn must be the complete ARN of a Secrets "
                    "Manager secret (arn:<partition>:secretsmanager:<region>:<account>:secret:"
                    f"<name>-<6 characters>): {nats_creds}"
                )

        stream_cert, stream_domain = stream_context(get)

        safety = get("safetyKernelAddr")
        if safety is None and redis_url is not None:
            safety = LOCAL_SAFETY_KERNEL_ADDR
        safety_ca = ca_file("safetyKernelCa", get("safetyKernelCa"))
        nats_ca = ca_file("natsCa", get("natsCa"))
        if nats_ca is not None and not nats_url.startswith("tls://"):
            raise ContextError("context natsCa is the CA of a tls:// natsUrl: give tls:// URL(s)")

        log_level = (get("logLevel") or "INFO").upper()
        if log_level not in LOG_LEVELS:
            raise ContextError(f"context logLevel must be one of {', '.join(LOG_LEVELS)}")

        architecture = get("architecture") or "x86_64"
        if architecture not in ARCHITECTURES:
            raise ContextError(f"context architecture must be one of {', '.join(ARCHITECTURES)}")

        egress = (get("egress") or EGRESS_ENDPOINTS).lower()
        if egress not in EGRESS_MODES:
            raise ContextError(f"context egress must be one of {', '.join(EGRESS_MODES)}: {egress}")

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
            "safety_kernel_ca": safety_ca,
            "architecture": architecture,
            "egress": egress,
            "nats_credentials_secret_arn": nats_creds,
            "nats_ca": nats_ca,
            "dev_nats": dev_nats == "true",
            "nats_cluster": nats_cluster == "true",
            "output_policy": output_policy == "true",
            "cache": cache_config(get, aws=redis_url is None),
            "network": read_network_settings(get, aws=redis_url is None),
            "stream_certificate_arn": stream_cert,
            "stream_domain": stream_domain,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
