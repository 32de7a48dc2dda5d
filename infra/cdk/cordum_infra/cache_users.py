"""ElastiCache users for the job store: one per kind of client, as on the local stack.

The rules come from ``cordum.redis_acl`` (the local stack's Redis gets the same users
at start), so a worker is refused a write to a job's meta the same way on both:

- ``cordum-functions``: the Lambda functions;
- ``cordum-bridge``: the NATS bridge;
- ``cordum-kernel``: the safety kernel's velocity windows only;
- ``cordum-worker``: workers read ``ctx:*`` and write ``res:*``, nothing else;
- ``cordum-stream``: the live event stream reads job keys and writes its event
  logs under ``cordum:stream:*`` (its login exists whether or not the stack runs
  the stream: context streamCertificateArn).

Each user's password is generated in its own secret, a JSON object
``{"username", "password"}`` that ``cordum.runtime.redis_credentials`` reads as is: a
function is told the secret's ARN, a Fargate task gets the password as an ECS secret
beside its user name. The worker's secret is an output of the stack: workers run
outside it and are handed that secret by their operator.

ElastiCache wants a user named ``default`` in every user group: here it is switched
off (``off``, no command), so a connection that does not log in as one of the users
above can do nothing at all.
"""

from __future__ import annotations

import hashlib
import re

from aws_cdk import Acknowledgment, CfnOutput, Stack, Validations
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cordum.redis_acl import BRIDGE, FUNCTIONS, KERNEL, STREAM, WORKERS, AclUser

PASSWORD_LENGTH = 64
"""ElastiCache accepts 16 to 128 characters."""
PASSWORD_SPECIALS = "!&#$^<>-"
"""The only punctuation ElastiCache accepts in a password."""
PASSWORD_EXCLUDED = "".join(
    c for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" if c not in PASSWORD_SPECIALS
)
"""Every other printable punctuation character, kept out of the generated passwords."""

DEFAULT_USER_ACCESS = "off -@all"
"""The ``default`` user ElastiCache requires in a group: disabled, allowed nothing."""

ID_LIMIT = 40
"""ElastiCache user and group ids: at most 40 lowercase letters, digits and hyphens."""

ROLES: dict[str, AclUser] = {
    "functions": FUNCTIONS,
    "bridge": BRIDGE,
    "kernel": KERNEL,
    "worker": WORKERS,
    "stream": STREAM,
}
"""Role -> the user it connects as; the role also names the user's id and secret."""

ROTATION_REASON = (
    "ElastiCache offers no managed rotation for a user's password: a rotation adds a "
    "second password to the user (ModifyUser, both accepted), restarts the clients, "
    "which read the secret once per container, then removes the first. It is an "
    "operator procedure (docs/deploy.md), not a rotation function."
)


def resource_id(stack_name: str, suffix: str) -> str:
    """An ElastiCache id for `suffix` in this stack: unique per account and region, as
    ElastiCache requires, so a second stack does not collide with the first.

    The stack's name, lowercased and cut short, keeps ids readable; a digest of the
    whole name keeps two long names that share a beginning apart.
    """
    digest = hashlib.sha256(stack_name.encode()).hexdigest()[:6]
    room = ID_LIMIT - len(suffix) - len(digest) - 2
    stem = re.sub(r"-+", "-", stack_name.lower())[:room].strip("-")
    return f"{stem}-{digest}-{suffix}"


class CacheUsers(Construct):
    """The users, their secrets and the user group the replication group attaches."""

    def __init__(self, scope: Construct, construct_id: str, *, engine: str) -> None:
        super().__init__(scope, construct_id)
        stack_name = Stack.of(self).stack_name
        self.secrets: dict[str, secretsmanager.Secret] = {}
        """Role -> its user's secret (``{"username", "password"}``)."""
        self.users: dict[str, AclUser] = dict(ROLES)
        users: list[elasticache.CfnUser] = []
        for role, user in ROLES.items():
            secret = secretsmanager.Secret(
                self,
                f"{role.capitalize()}Secret",
                description=f"Redis login of the Cordum {role} ({user.name})",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    secret_string_template=f'{{"username": "{user.name}"}}',
                    generate_string_key="password",
                    password_length=PASSWORD_LENGTH,
                    exclude_characters=PASSWORD_EXCLUDED,
                    include_space=False,
                    require_each_included_type=True,
                ),
            )
            Validations.of(secret).acknowledge(
                Acknowledgment(id="AwsSolutions-SMG4", reason=ROTATION_REASON)
            )
            self.secrets[role] = secret
            users.append(elasticache.CfnUser(
                self,
                f"{role.capitalize()}User",
                user_id=resource_id(stack_name, role),
                user_name=user.name,
                engine=engine,
                access_string=user.rules,
                # A dynamic reference, resolved by CloudFormation at deploy time.
                authentication_mode={
                    "Type": "password",
                    "Passwords": [secret.secret_value_from_json("password").unsafe_unwrap()],
                },
            ))
        users.append(elasticache.CfnUser(
            self,
            "DefaultUser",
            user_id=resource_id(stack_name, "default"),
            user_name="default",
            engine=engine,
            access_string=DEFAULT_USER_ACCESS,
            authentication_mode={"Type": "no-password-required"},
        ))
        self.group = elasticache.CfnUserGroup(
            self,
            "Group",
            user_group_id=resource_id(stack_name, "users"),
            engine=engine,
            user_ids=[u.ref for u in users],
        )
        """Attach to the replication group (``UserGroupIds``)."""
        CfnOutput(
            self,
            "WorkerSecretArn",
            value=self.secrets["worker"].secret_arn,
            description=(
                "Secret holding the Redis login workers use (read ctx:*, write res:*): "
                "hand it to the workers' operator"
            ),
        )

    def secret(self, role: str) -> secretsmanager.Secret:
        """The secret of `role` (``functions``, ``bridge``, ``kernel``, ``worker``,
        ``stream``)."""
        return self.secrets[role]
