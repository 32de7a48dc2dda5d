"""NATS for the AWS stack: which NATS its clients reach, and how they log in.

Every NATS client of an AWS stack (the functions and the bridge) speaks TLS and
logs in; plaintext ``nats://`` and anonymous access are for local stacks only
(cordum_infra.settings refuses both without redisUrl). Two choices:

- The stack's own cluster (``natsCluster=true``, cordum_infra.nats_cluster): three
  JetStream nodes on Fargate, TLS with a certificate the stack issues, a password
  the stack generates. The clients get the CA as NATS_TLS_CA.
- An existing cluster (``natsUrl=tls://...``): its credentials (``.creds`` text, or
  JSON ``{"username", "password"}``) in a Secrets Manager secret named by
  ``natsCredentialsSecretArn``. The clients verify the server against the CA of
  ``natsCa`` when given (NATS_TLS_CA), else the system trust store.

Either way the clients are told the credentials' secret ARN in
NATS_CREDS_SECRET_ARN and may read exactly that secret; the value never passes
through a template.

``devNats=true``: the decision is that no insecure development NATS remains. It
is the stack's own cluster with one node (same image, TLS and generated
password; no routes, its store deleted with the stack), so a development
account runs what production runs, at a third of the price, and no flag can put
an AWS stack's jobs on plaintext.
"""

from __future__ import annotations

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

NATS_CREDS_ENV = "NATS_CREDS_SECRET_ARN"
"""Environment variable naming the secret that holds the NATS credentials."""
NATS_TLS_CA_ENV = "NATS_TLS_CA"
"""Environment variable holding the PEM of the CA the clients verify NATS against
(cordum.runtime); unset, the system trust store."""


class NatsCredentials(Construct):
    """The secret holding the NATS credentials of the stack's clients, and the CA they trust.

    `secret_arn`: a complete ARN given by the operator; or `secret`: the stack's own.
    `ca_pem`: the CA of the stack's own cluster, or the one ``natsCa`` names; None
    trusts the system store.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        secret_arn: str | None = None,
        secret: secretsmanager.ISecret | None = None,
        ca_pem: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if (secret_arn is None) == (secret is None):
            raise ValueError("NatsCredentials: give secret_arn or secret, not both")
        if secret is None:
            assert secret_arn is not None
            # A complete ARN (with the 6-character suffix): grants name exactly this
            # secret instead of ``<name>-??????``.
            secret = secretsmanager.Secret.from_secret_complete_arn(self, "Secret", secret_arn)
        self.secret = secret
        self.secret_arn = secret.secret_arn
        self.ca_pem = ca_pem

    def _environment(self) -> dict[str, str]:
        env = {NATS_CREDS_ENV: self.secret_arn}
        if self.ca_pem is not None:
            env[NATS_TLS_CA_ENV] = self.ca_pem
        return env

    def grant_function(self, fn: lambda_.Function) -> None:
        """Tell `fn` where the credentials are (and the CA) and let it read them."""
        for key, value in self._environment().items():
            fn.add_environment(key, value)
        self.secret.grant_read(fn)

    def grant_container(self, container: ecs.ContainerDefinition) -> None:
        """Same for a container; its task role reads the secret."""
        for key, value in self._environment().items():
            container.add_environment(key, value)
        self.secret.grant_read(container.task_definition.task_role)
