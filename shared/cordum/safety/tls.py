"""TLS between the safety kernel and its clients, from Cordum's variables.

Server (``cordum-safety-kernel``):

- ``SAFETY_KERNEL_TLS_CERT`` + ``SAFETY_KERNEL_TLS_KEY``: PEM certificate chain and
  private key. With both set the kernel serves TLS only; with one of them set it
  refuses to start.

Client (:class:`~cordum.safety.client.SafetyClient`):

- ``SAFETY_KERNEL_TLS_CA``: PEM of the CA to trust; the connection is TLS and
  the kernel's certificate must carry the host of ``SAFETY_KERNEL_ADDR``.
- ``SAFETY_KERNEL_TLS_REQUIRED=true``: never connect in plaintext. Without a CA the
  client cannot be built (a ConfigError at construction, not a failing check later).
- ``SAFETY_KERNEL_INSECURE=true``: plaintext is intended. It contradicts
  ``SAFETY_KERNEL_TLS_REQUIRED`` and is ignored when a CA is set.

Each PEM setting is either a file path or the PEM text itself (a value starting with
``-----BEGIN``): an ECS task gets the kernel's key from Secrets Manager as a variable,
and a Lambda function gets the CA in its environment, with no file to point at.

Without a CA and without ``SAFETY_KERNEL_TLS_REQUIRED`` the client speaks plaintext,
as Cordum does outside production (the local stack). Flags accept true/false, 1/0,
yes/no, on/off in any case; anything else is a ConfigError naming the variable, and
so is a file that cannot be read or a value that holds no PEM block.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import grpc
    import grpc.aio

TLS_CERT_ENV = "SAFETY_KERNEL_TLS_CERT"
TLS_KEY_ENV = "SAFETY_KERNEL_TLS_KEY"
TLS_CA_ENV = "SAFETY_KERNEL_TLS_CA"
TLS_REQUIRED_ENV = "SAFETY_KERNEL_TLS_REQUIRED"
INSECURE_ENV = "SAFETY_KERNEL_INSECURE"

PEM_TEXT_PREFIX = "-----BEGIN "
"""A setting starting with this is PEM text, anything else a file path."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The kernel's certificate chain and key (PEM bytes)."""

    cert_chain: bytes
    private_key: bytes

    @classmethod
    def from_files(cls, cert: Path, key: Path) -> ServerTLS:
        return cls(_pem(cert, TLS_CERT_ENV, b"CERTIFICATE"),
                   _pem(key, TLS_KEY_ENV, b"PRIVATE KEY"))

    def credentials(self) -> grpc.ServerCredentials:
        import grpc

        return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)])


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """How a client reaches the kernel: TLS trusting ``root_certificates``, or plaintext."""

    root_certificates: bytes | None = None
    """PEM of the CA(s) to trust; None means plaintext."""

    @property
    def secure(self) -> bool:
        return self.root_certificates is not None

    @classmethod
    def from_ca_file(cls, ca: Path) -> ClientTLS:
        return cls(_pem(ca, TLS_CA_ENV, b"CERTIFICATE"))

    def channel(self, addr: str, *, options: Sequence[tuple[str, Any]] = (),
                interceptors: Sequence[Any] | None = None) -> grpc.aio.Channel:
        """An asyncio channel to ``addr`` with this transport."""
        import grpc.aio

        if self.root_certificates is None:
            return grpc.aio.insecure_channel(addr, options=options, interceptors=interceptors)
        creds = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
        return grpc.aio.secure_channel(addr, creds, options=options, interceptors=interceptors)


PLAINTEXT = ClientTLS()


def server_tls_from_env(env: Mapping[str, str] | None = None) -> ServerTLS | None:
    """The kernel's TLS settings; None when neither variable is set."""
    env = os.environ if env is None else env
    cert = env.get(TLS_CERT_ENV, "").strip()
    key = env.get(TLS_KEY_ENV, "").strip()
    if not cert and not key:
        return None
    if not cert or not key:
        missing = TLS_KEY_ENV if cert else TLS_CERT_ENV
        present = TLS_CERT_ENV if cert else TLS_KEY_ENV
        raise ConfigError(f"{missing}: must be set together with {present}")
    return ServerTLS(_pem_setting(cert, TLS_CERT_ENV, b"CERTIFICATE"),
                     _pem_setting(key, TLS_KEY_ENV, b"PRIVATE KEY"))


def client_tls_from_env(env: Mapping[str, str] | None = None) -> ClientTLS:
    """The client's transport (see the module doc for the rules)."""
    env = os.environ if env is None else env
    ca = env.get(TLS_CA_ENV, "").strip()
    required = flag(env, TLS_REQUIRED_ENV)
    insecure = flag(env, INSECURE_ENV)
    if required and insecure:
        raise ConfigError(f"{INSECURE_ENV}: plaintext is not allowed while "
                          f"{TLS_REQUIRED_ENV} is true")
    if ca:
        return ClientTLS(_pem_setting(ca, TLS_CA_ENV, b"CERTIFICATE"))
    if required:
        raise ConfigError(f"{TLS_CA_ENV}: required when {TLS_REQUIRED_ENV} is true "
                          "(refusing to reach the safety kernel in plaintext)")
    return PLAINTEXT


def flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name}: not a boolean: {raw!r} (use true or false)")


def _pem_setting(value: str, var: str, kind: bytes) -> bytes:
    """The PEM a variable holds: the text itself, or the file it names."""
    if not value.startswith(PEM_TEXT_PREFIX):
        return _pem(Path(value), var, kind)
    data = value.encode()
    if kind not in data:
        # Never echo the value: it may be a private key.
        raise ConfigError(f"{var}: holds no PEM {kind.decode().lower()}")
    return data


def _pem(path: Path, var: str, kind: bytes) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{var}: cannot read {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN " not in data or kind not in data:
        raise ConfigError(f"{var}: {path} holds no PEM {kind.decode().lower()}")
    return data
