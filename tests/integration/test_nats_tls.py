"""The stack's NATS server image configuration against real ``nats-server`` processes.

``docker/nats-entrypoint.sh`` (what the Fargate nodes run) is started here with the
environment ECS gives a node: certificate, key, CA, user and password, and for a
cluster the route list. Our clients connect through cordum.runtime the way the
functions and the bridge do: TLS verified against NATS_TLS_CA, the password from
the NATS_CREDS_SECRET_ARN secret (its value stubbed, no AWS call). Skipped when no
``nats-server`` binary is on the PATH.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cordum import runtime
from cordum.bus.bridge import ensure_stream_when_ready, until_stopped
from cordum.bus.settings import load_bridge_settings
from cordum.config import load_settings
from cordum.protocol import SUBJECT_SUBMIT
from cordum.safety.kernel_pki import issue

pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None, reason="no nats-server")

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "nats-entrypoint.sh"
ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
USER, PASSWORD = "cordum", "Gen3ratedLettersAndDigits0nly"
START_TIMEOUT_S = 10.0
REFUSAL_WAIT_S = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pki:
    ca_pem: str
    cert_pem: str
    key_pem: str


def _node_pki(host: str) -> Pki:
    """A CA and a node certificate for `host` valid for server and client authentication
    (a route's dialing node presents it as a client certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def builder(
        subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (builder("test nats CA", name("test nats CA"), ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (builder("nats", ca.subject, key)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return Pki(ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(),
               key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode())


@dataclass
class Node:
    port: int
    monitor: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.port}"


def _start(tmp: Path, index: int, pki: Pki, routes: list[int] | None = None,
           cluster_port: int | None = None) -> Node:
    port, monitor = _free_port(), _free_port()
    env = {
        **os.environ,
        "NATS_TLS_CERT": pki.cert_pem, "NATS_TLS_KEY": pki.key_pem, "NATS_TLS_CA": pki.ca_pem,
        "NATS_USER": USER, "NATS_PASSWORD": PASSWORD,
        "NATS_CONFIG_DIR": str(tmp / f"conf{index}"),
    }
    if routes:
        env["NATS_ROUTES"] = ",".join(f"127.0.0.1:{p}" for p in routes)
        env["NATS_CLUSTER_PORT"] = str(cluster_port)
        env["NATS_CLUSTER_ADVERTISE"] = f"127.0.0.1:{cluster_port}"
    log = tmp / f"nats{index}.log"
    process = subprocess.Popen(
        ["sh", str(ENTRYPOINT), "--server_name", f"nats-{index}", "--port", str(port),
         "--http_port", str(monitor), "--jetstream", "--store_dir", str(tmp / f"store{index}")],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    node = Node(port, monitor, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return node
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"nats-server did not start: {log.read_text()[-2000:]}")


def _stop(nodes: list[Node]) -> None:
    for node in nodes:
        node.process.terminate()
    for node in nodes:
        try:
            node.process.wait(5)
        except subprocess.TimeoutExpired:
            node.process.kill()


def _healthz(node: Node, query: str = "") -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor}/healthz{query}", timeout=2):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials secret as the stack generates it (value stubbed: no AWS call)."""
    monkeypatch.setattr(runtime, "_auth_tokens",
                        {ARN: json.dumps({"username": USER, "password": PASSWORD})})


@pytest.fixture
def single(tmp_path: Path) -> Iterator[tuple[Node, Pki]]:
    """One node (devNats): TLS and password, no routes."""
    pki = _node_pki("127.0.0.1")
    node = _start(tmp_path, 0, pki)
    yield node, pki
    _stop([node])


def _settings(url: str, ca: str, arn: str | None = ARN):  # noqa: ANN202
    env = {"NATS_URL": url, "NATS_TLS_CA": ca}
    if arn is not None:
        env["NATS_CREDS_SECRET_ARN"] = arn
    return load_settings(env=env)


def test_client_reaches_a_node_over_tls_with_the_generated_password(
    single: tuple[Node, Pki], secret: None
) -> None:
    node, pki = single

    async def roundtrip() -> bytes:
        nc = await runtime.connect_nats(_settings(node.url, pki.ca_pem), name="test")
        try:
            sub = await nc.subscribe("cordum.test.tls")
            await nc.publish("cordum.test.tls", b"over tls")
            return (await sub.next_msg(timeout=2)).data
        finally:
            await nc.close()

    assert asyncio.run(roundtrip()) == b"over tls"
    # And the node reports itself healthy to ECS's check
    assert _healthz(node, "?js-enabled-only=true") == 200


def test_a_node_under_another_ca_is_refused(single: tuple[Node, Pki], secret: None) -> None:
    node, _ = single
    other_ca = issue("127.0.0.1").ca_pem
    # (nats-py retries a failed TLS handshake of its first connect: bounded here)
    connect = runtime.connect_nats(_settings(node.url, other_ca), name="test")
    with pytest.raises((TimeoutError, OSError)):
        asyncio.run(asyncio.wait_for(connect, REFUSAL_WAIT_S))
    # the server saw the client abandon the handshake
    assert "TLS handshake error" in node.log.read_text()


def test_a_client_without_the_password_is_refused(single: tuple[Node, Pki]) -> None:
    node, pki = single
    from nats.errors import NoServersError

    # (each attempt is refused; nats-py reports it once out of attempts)
    with pytest.raises(NoServersError):
        asyncio.run(runtime.connect_nats(_settings(node.url, pki.ca_pem, arn=None), name="test"))
    assert "authentication error" in node.log.read_text()


def test_three_nodes_route_over_tls_and_keep_a_replicated_stream_with_one_lost(
    tmp_path: Path, secret: None
) -> None:
    pki = _node_pki("127.0.0.1")
    cluster_ports = [_free_port() for _ in range(3)]
    nodes = [_start(tmp_path, i, pki, cluster_ports, cluster_ports[i]) for i in range(3)]
    try:
        # Then the three elect a JetStream leader over their TLS routes
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_healthz(n) != 200 for n in nodes):
            time.sleep(0.5)
        assert [_healthz(n) for n in nodes] == [200] * 3, nodes[0].log.read_text()[-3000:]
        url = ",".join(n.url for n in nodes)

        async def replicated() -> tuple[int, int]:
            nc = await runtime.connect_nats(_settings(url, pki.ca_pem), name="test")
            try:
                # When the bridge creates the job stream with JOB_STREAM_REPLICAS=3 (the
                # stack's setting for its cluster)
                js = nc.jetstream(timeout=5)
                replicas_wanted = load_bridge_settings(
                    {"SUBMIT_QUEUE_URL": "s", "RESULT_QUEUE_URL": "r",
                     "JOB_STREAM_REPLICAS": "3"}).stream_replicas
                name = await ensure_stream_when_ready(js, replicas=replicas_wanted)
                info = await js.stream_info(name)
                replicas = 1 + len(info.cluster.replicas or []) if info.cluster else 1
                await js.publish(SUBJECT_SUBMIT, b"1")
                # And one node goes, the other two keep the stream writable
                nodes[2].process.terminate()
                nodes[2].process.wait(5)
                for _ in range(40):
                    try:
                        await js.publish(SUBJECT_SUBMIT, b"2", timeout=1)
                        break
                    except Exception:
                        await asyncio.sleep(0.25)
                return replicas, (await js.stream_info(name)).state.messages
            finally:
                await nc.close()

        assert asyncio.run(replicated()) == (3, 2)
    finally:
        _stop(nodes)


def test_the_bridge_waits_for_jetstream_instead_of_failing(tmp_path: Path) -> None:
    # Given a NATS server whose JetStream does not answer (not enabled)
    port = _free_port()
    process = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)

        async def wait() -> str | None:
            import nats

            nc = await nats.connect(f"nats://127.0.0.1:{port}")
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(3.0, stop.set)
            try:
                return await until_stopped(ensure_stream_when_ready(nc.jetstream(timeout=0.5)),
                                           stop)
            finally:
                await nc.close()

        # Then the bridge keeps asking for its stream until it is told to stop
        assert asyncio.run(wait()) is None
    finally:
        process.terminate()
        process.wait(5)
