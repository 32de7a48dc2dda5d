"""Checks of the context values that name things outside the stack: secret and
certificate ARNs, DNS names, CA files, an outside NATS. Each raises a
:class:`ContextError` naming the key (cordum_infra.settings reads the context)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path


class ContextError(ValueError):
    """A context value is missing or malformed; the message names the key."""


SECRET_ARN = re.compile(r"^arn:[\w-]+:secretsmanager:[\w-]+:\d{12}:secret:[\w/+=.@-]+-\w{6}$")
"""A complete secret ARN: name plus the 6-character suffix Secrets Manager adds."""
CERTIFICATE_ARN = re.compile(
    r"^arn:[\w-]+:acm:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d):\d{12}:certificate/"
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
"""An ACM certificate ARN: its region (where the load balancer must be), an account,
the certificate's id (a UUID)."""
DOMAIN_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
"""A DNS name of two labels or more, lowercase."""


def stream_context(get: Callable[[str], str | None]) -> tuple[str | None, str | None]:
    """``streamCertificateArn`` and ``streamDomain`` (lowercase, no trailing dot),
    each checked for its shape."""
    stream_cert = get("streamCertificateArn")
    if stream_cert is not None and not CERTIFICATE_ARN.match(stream_cert):
        raise ContextError(
            "context streamCertificateArn must be the ARN of an ACM certificate "
            "(arn:<partition>:acm:<region>:<account>:certificate/<id>): "
            f"{stream_cert}"
        )
    stream_domain = get("streamDomain")
    if stream_domain is not None:
        stream_domain = stream_domain.lower().rstrip(".")
        if not DOMAIN_NAME.match(stream_domain):
            raise ContextError(
                "context streamDomain must be a DNS name the stream's certificate "
                f"covers, such as stream.example.com: {stream_domain}"
            )
    return stream_cert, stream_domain


def check_outside_nats(nats_url: str, creds_arn: str | None) -> None:
    """An AWS stack's outside NATS: TLS and credentials, or a ContextError saying what to do."""
    plaintext = [u.strip() for u in nats_url.split(",") if u.strip().startswith("nats://")]
    if plaintext:
        raise ContextError(
            f"context natsUrl: plaintext nats:// is refused on AWS (no redisUrl): {plaintext[0]}. "
            "Give tls:// URL(s) with natsCredentialsSecretArn, or -c natsCluster=true to run "
            "a three-node NATS cluster (TLS, generated credentials) in the stack"
        )
    if creds_arn is None:
        raise ContextError(
            "context natsCredentialsSecretArn is required with a tls:// natsUrl on AWS (no "
            "redisUrl): the complete ARN of a Secrets Manager secret holding the cluster's "
            '.creds text or JSON {"username", "password"}. Or -c natsCluster=true to run the '
            "stack's own cluster"
        )


def ca_file(key: str, value: str | None) -> str | None:
    """The PEM text of the CA file context `key` names, checked to hold a certificate."""
    if value is None:
        return None
    path = Path(value).expanduser()
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ContextError(f"context {key}: cannot read {path}: {exc}") from exc
    if not text.startswith("-----BEGIN CERTIFICATE-----") or "PRIVATE KEY" in text:
        raise ContextError(
            f"context {key}: {path} must hold the CA certificate (PEM) and nothing else"
        )
    return text
