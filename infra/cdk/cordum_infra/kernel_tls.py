"""The stack's certificate authority and the server certificates it issues at deploy time.

Two CloudFormation custom resources, served by one Lambda container image
(``docker/kernel-pki.Dockerfile``, handler ``cordum.safety.kernel_pki``):

- the CA (``Custom::CordumTlsCa``): made once, its certificate and key kept in a
  Secrets Manager secret of this construct. Resource and secret are retained: no
  update, replacement or stack deletion throws the CA away, so clients that trust it
  keep trusting every server certificate it signs;
- a leaf per server (``Custom::CordumTlsCertificate``, :meth:`KernelTls.leaf`): a key
  and a certificate for the names clients dial, signed by the CA and written into the
  leaf's own secret (ECS hands both to the server's tasks at start).

The template holds no key. Clients get the CA certificate (public) in their
environment (the kernel's: SAFETY_KERNEL_TLS_CA). A leaf is issued again when its
names change (a replaced load balancer) or its generation context does
(``-c kernelTlsGeneration=2`` rotates the kernel's): only the leaf changes, so a check
made while the tasks roll onto the new certificate still verifies. The leaf's serial
goes into the server's environment so that ECS rolls the tasks onto it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Acknowledgment, CustomResource, Duration, RemovalPolicy, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cordum_infra.functions import ARCHITECTURES, LOG_RETENTION

# The handler module's names, spelled out here because the CDK app does not import
# the cordum library (cordum.safety.kernel_pki defines the same).
CA_RESOURCE_TYPE = "Custom::CordumTlsCa"
LEAF_RESOURCE_TYPE = "Custom::CordumTlsCertificate"
CA_SECRET_PROPERTY = "CaSecretArn"
SECRET_PROPERTY = "SecretArn"
DNS_NAMES_PROPERTY = "DnsNames"
GENERATION_PROPERTY = "Generation"
CA_SERIAL_PROPERTY = "CaSerial"
CA_ATTRIBUTE = "CaPem"
CA_SERIAL_ATTRIBUTE = "CaSerial"
SERIAL_ATTRIBUTE = "Serial"
CERT_FIELD = "cert"
KEY_FIELD = "key"

GENERATION_CONTEXT = "kernelTlsGeneration"
"""Context key whose change re-issues the kernel's leaf (the CA stays)."""
DEFAULT_GENERATION = "1"

ISSUER_TIMEOUT = Duration.minutes(3)
"""The work is milliseconds (one P-256 key and signature) plus at most two Secrets
Manager calls; the handler bounds each call to 3 tries of 15 s and its answer to
CloudFormation to 30 s (about 130 s at worst), so it always answers inside 3 minutes."""
ISSUER_MEMORY_MB = 256
RESOURCE_TIMEOUT = Duration.minutes(5)
"""How long CloudFormation waits for the issuer's answer (its default is an hour): the
function's 3 minutes, plus the cold start of a container image and margin. A lost
answer fails the deployment (and rolls it back) after 5 minutes, not 60."""

ROTATION_REASON = (
    "The secret is written by the stack's deploy-time issuer (Custom::CordumTlsCa / "
    "Custom::CordumTlsCertificate). A server certificate is rotated by a new issue "
    "(change its generation context and deploy), which also rolls the tasks that use "
    "it; a Secrets Manager rotation function would change the secret behind the "
    "running tasks' back. The CA is kept on purpose: clients trust it."
)


@dataclass(frozen=True)
class TlsLeaf:
    """A server certificate of the stack's CA, as :meth:`KernelTls.leaf` returns it."""

    secret: secretsmanager.Secret
    """JSON ``{"cert", "key"}``: hand its fields to the server as ECS secrets."""
    resource: CustomResource
    """The issue: a server's tasks should start after it (``add_dependency``)."""
    serial: str
    """Serial of the current certificate: put it in the server's environment so that
    a new issue rolls the tasks (a task reads its secrets once, at start)."""
    ca_pem: str
    """PEM of the CA that signed it (the same for every leaf of the stack)."""


class KernelTls(Construct):
    """The stack's persistent CA, its issuer, and :meth:`leaf` for server certificates."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        issuer_code: lambda_.DockerImageCode,
        architecture: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.ca_secret = secretsmanager.Secret(
            self,
            "CaSecret",
            description=(
                "Certificate and private key of the Cordum stack's TLS CA, made once by "
                "the stack's issuer; kept when the stack is deleted"
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
        """JSON ``{"cert", "key"}`` of the CA; read and written by the issuer alone."""
        Validations.of(self.ca_secret).acknowledge(
            Acknowledgment(id="AwsSolutions-SMG4", reason=ROTATION_REASON)
        )
        log_group = logs.LogGroup(
            self,
            "IssuerLogs",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.issuer = lambda_.DockerImageFunction(
            self,
            "Issuer",
            code=issuer_code,
            architecture=ARCHITECTURES[architecture],
            description="Keeps the Cordum stack's TLS CA and issues its server certificates",
            timeout=ISSUER_TIMEOUT,
            memory_size=ISSUER_MEMORY_MB,
            log_group=log_group,
            # A failed issue fails the deployment; a retry would only issue twice.
            retry_attempts=0,
        )
        # The CA's key is read (to sign) and, once, written; leaves are written only.
        self.ca_secret.grant_read(self.issuer)
        self.ca_secret.grant_write(self.issuer)
        self.ca = CustomResource(
            self,
            "Ca",
            service_token=self.issuer.function_arn,
            resource_type=CA_RESOURCE_TYPE,
            properties={CA_SECRET_PROPERTY: self.ca_secret.secret_arn},
            service_timeout=RESOURCE_TIMEOUT,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.ca_pem = self.ca.get_att_string(CA_ATTRIBUTE)
        """PEM of the CA: what every client of the stack's servers trusts."""
        self.ca_serial = self.ca.get_att_string(CA_SERIAL_ATTRIBUTE)

    def leaf(
        self,
        construct_id: str,
        dns_names: Sequence[str],
        *,
        generation_context: str = GENERATION_CONTEXT,
    ) -> TlsLeaf:
        """A server certificate for `dns_names` (names, ``*.zone`` wildcards or IP
        addresses) signed by the CA, in a new secret; issued again when the names, the
        context `generation_context` or the CA change."""
        if not dns_names:
            raise ValueError(f"leaf {construct_id}: give at least one name clients dial")
        scope = Construct(self, construct_id)
        secret = secretsmanager.Secret(
            scope,
            "Secret",
            description=(
                f"TLS certificate and private key {construct_id} of the Cordum stack, "
                "written by the stack's issuer at deploy time"
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        Validations.of(secret).acknowledge(
            Acknowledgment(id="AwsSolutions-SMG4", reason=ROTATION_REASON)
        )
        secret.grant_write(self.issuer)
        generation = str(self.node.try_get_context(generation_context) or DEFAULT_GENERATION)
        resource = CustomResource(
            scope,
            "Certificate",
            service_token=self.issuer.function_arn,
            resource_type=LEAF_RESOURCE_TYPE,
            properties={
                CA_SECRET_PROPERTY: self.ca_secret.secret_arn,
                # The CA's serial: a leaf is issued after the CA and again if it changed.
                CA_SERIAL_PROPERTY: self.ca_serial,
                SECRET_PROPERTY: secret.secret_arn,
                DNS_NAMES_PROPERTY: list(dns_names),
                GENERATION_PROPERTY: generation,
            },
            service_timeout=RESOURCE_TIMEOUT,
        )
        return TlsLeaf(
            secret=secret,
            resource=resource,
            serial=resource.get_att_string(SERIAL_ATTRIBUTE),
            ca_pem=self.ca_pem,
        )
