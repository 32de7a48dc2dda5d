"""The safety kernel's TLS certificate, issued at deploy time for its load balancer's name.

A custom resource (``Custom::CordumKernelTls``) backed by a Lambda container image
(``docker/kernel-pki.Dockerfile``, handler ``cordum.safety.kernel_pki``) makes a CA
and a kernel certificate for the host clients dial, writes certificate and key into
a secret of this construct, and returns the CA certificate. So:

- the template holds no key: the secret's value is written by the issuer at deploy
  time and read by ECS at task start (the kernel's SAFETY_KERNEL_TLS_CERT / _KEY);
- the clients get the CA certificate (public) in their environment;
- the CA's key is never kept: nothing else can be signed for those clients.

A new certificate is issued when the host changes (a replaced load balancer) or the
context ``kernelTlsGeneration`` does (``-c kernelTlsGeneration=2`` rotates it). Its
serial goes into the kernel's environment so that ECS rolls the tasks onto it.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CustomResource, Duration, RemovalPolicy, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cordum_infra.functions import ARCHITECTURES, LOG_RETENTION

# The handler module's names, spelled out here because the CDK app does not import
# the cordum library (cordum.safety.kernel_pki defines the same).
HOST_PROPERTY = "Host"
SECRET_PROPERTY = "SecretArn"
GENERATION_PROPERTY = "Generation"
CA_ATTRIBUTE = "CaPem"
SERIAL_ATTRIBUTE = "Serial"
CERT_FIELD = "cert"
KEY_FIELD = "key"

RESOURCE_TYPE = "Custom::CordumKernelTls"
GENERATION_CONTEXT = "kernelTlsGeneration"
DEFAULT_GENERATION = "1"

ISSUER_TIMEOUT = Duration.minutes(1)
"""Two P-256 keys and one Secrets Manager call: a second or two."""
ISSUER_MEMORY_MB = 256

ROTATION_REASON = (
    "The secret holds the safety kernel's TLS certificate and key, written by the "
    "stack's issuer (Custom::CordumKernelTls). Rotation is a new issue, which must "
    "reach the kernel tasks and the clients' CA together: change the context "
    "kernelTlsGeneration and deploy. A Secrets Manager rotation function would change "
    "the key without the clients' CA."
)


class KernelTls(Construct):
    """The kernel's certificate secret, its issuer and the CA clients trust."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        host: str,
        issuer_code: lambda_.DockerImageCode,
        architecture: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description=(
                "TLS certificate and private key of the Cordum safety kernel, written by "
                "the stack's issuer at deploy time"
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        """JSON ``{"cert", "key"}``; readable by the kernel's task execution role only."""
        Validations.of(self.secret).acknowledge(
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
            description="Issues the Cordum safety kernel's TLS certificate (deploy time)",
            timeout=ISSUER_TIMEOUT,
            memory_size=ISSUER_MEMORY_MB,
            log_group=log_group,
            # A failed issue fails the deployment; a retry would only issue twice.
            retry_attempts=0,
        )
        # Writes only: the issuer never reads a key back.
        self.secret.grant_write(self.issuer)
        generation = str(self.node.try_get_context(GENERATION_CONTEXT) or DEFAULT_GENERATION)
        self.resource = CustomResource(
            self,
            "Certificate",
            service_token=self.issuer.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={
                HOST_PROPERTY: host,
                SECRET_PROPERTY: self.secret.secret_arn,
                GENERATION_PROPERTY: generation,
            },
        )
        self.ca_pem = self.resource.get_att_string(CA_ATTRIBUTE)
        """PEM of the CA: the clients' SAFETY_KERNEL_TLS_CA."""
        self.serial = self.resource.get_att_string(SERIAL_ATTRIBUTE)
        """Serial of the kernel's current certificate."""
