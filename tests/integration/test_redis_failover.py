"""Redis on AWS from the client's side: the AUTH token, TLS, and riding out a failover.

ElastiCache does not run here, so the two behaviours that matter are rebuilt
with redis-server processes these tests start on free ports (the shared Redis
on 127.0.0.1:6379 is never made a replica):

- the primary endpoint is a DNS name that moves to the promoted replica. Here
  it is a TCP proxy: a new connection goes to the current primary, an open one
  stays with the node it was made to, as a pooled connection does after a
  failover, talking to the demoted primary, which answers READONLY;
- TLS with an AUTH token: a redis-server with a TLS port and requirepass, the
  token read from Secrets Manager (moto).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
import redis.asyncio as aioredis
from cryptography.hazmat.primitives import serialization
from moto import mock_aws
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, ReadOnlyError

from cordum import runtime
from cordum.config import ConfigError, load_settings
from tests.helpers import free_port
from tests.integration.test_safety_tls import make_ca, make_server_cert

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="needs the redis-server binary")

REGION = "eu-west-1"
START_TIMEOUT_S = 10.0
SYNC_TIMEOUT_S = 10.0

WRITE_SCRIPT = "return redis.call('SET', KEYS[1], ARGV[1])"


class RedisNode:
    """One private redis-server process."""

    def __init__(self, workdir: Path, *args: str, tls: bool = False) -> None:
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        port_args = ["--port", "0", "--tls-port"] if tls else ["--port"]
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [REDIS_SERVER, *port_args, str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir), "--repl-diskless-sync-delay", "0",
             *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.admin = redis.Redis(port=self.port, socket_timeout=2) if not tls else None

    def wait_ready(self) -> None:
        assert self.admin is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.admin.ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def replica_of(self, primary: RedisNode | None) -> None:
        assert self.admin is not None
        if primary is None:
            self.admin.replicaof("NO", "ONE")
        else:
            self.admin.replicaof("127.0.0.1", primary.port)

    def wait_in_sync(self) -> None:
        """Until this replica's link to its primary is up (the full sync done)."""
        assert self.admin is not None
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while self.admin.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica did not sync"
            time.sleep(0.05)

    def readonly_errors(self) -> int:
        assert self.admin is not None
        return int(self.admin.info("errorstats").get("errorstat_READONLY", {}).get("count", 0))

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class PrimaryEndpoint:
    """A TCP proxy standing in for the replication group's primary endpoint."""

    def __init__(self, target: RedisNode) -> None:
        self.target = target
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target.port)
        self._writers += [writer, up_writer]
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class ReplicationGroup:
    """A primary and a replica behind a primary endpoint; ``failover`` swaps them."""

    def __init__(self, workdir: Path) -> None:
        self.primary = RedisNode(workdir / "a")
        self.replica = RedisNode(workdir / "b")
        self.primary.wait_ready()
        self.replica.wait_ready()
        self.replica.replica_of(self.primary)
        self.replica.wait_in_sync()
        self.endpoint = PrimaryEndpoint(self.primary)

    def failover(self) -> None:
        """Promote the replica, move the endpoint to it, demote the old primary."""
        old, new = self.primary, self.replica
        assert old.admin is not None
        assert old.admin.execute_command("WAIT", 1, 2000) == 1  # nothing acknowledged is lost
        new.replica_of(None)
        self.endpoint.target = new
        old.replica_of(new)
        old.wait_in_sync()
        self.primary, self.replica = new, old

    def stop(self) -> None:
        self.primary.stop()
        self.replica.stop()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicationGroup]:
    g = ReplicationGroup(tmp_path)
    yield g
    g.stop()


@pytest.fixture
def fresh_runtime(aloop: asyncio.AbstractEventLoop) -> Iterator[None]:
    runtime.reset()
    yield
    aloop.run_until_complete(runtime.aclose())


# --- failover ----------------------------------------------------------------------------


def test_a_write_on_the_demoted_primary_is_retried_on_the_new_one(
    aloop: asyncio.AbstractEventLoop, group: ReplicationGroup, fresh_runtime: None
) -> None:
    key = f"test:failover:{uuid.uuid4().hex[:10]}"

    async def scenario() -> None:
        url = await group.endpoint.start()
        client = runtime.redis_client(load_settings(env={"REDIS_URL": url}))
        try:
            # Given a client whose pooled connection is to the primary
            assert await client.set(key, "before") is True
            demoted = group.primary
            refused_before = demoted.readonly_errors()
            # When the group fails over (that connection now reaches a replica)
            group.failover()
            # Then a write answers as if nothing happened
            assert await client.set(key, "after") is True
            assert await client.get(key) == b"after"
            # And it did meet READONLY on the demoted node, and went on over a new connection
            assert demoted.readonly_errors() == refused_before + 1
            assert group.endpoint.connections == 2
            assert group.primary.admin is not None
            assert group.primary.admin.get(key) == b"after"
        finally:
            await group.endpoint.close()

    aloop.run_until_complete(scenario())


def test_a_script_write_survives_a_failover_back_and_forth(
    aloop: asyncio.AbstractEventLoop, group: ReplicationGroup, fresh_runtime: None
) -> None:
    # Cordum's job transitions are Lua scripts: EVALSHA must recover the same way,
    # including on a new primary whose script cache does not hold the script.
    key = f"test:failover:{uuid.uuid4().hex[:10]}"

    async def scenario() -> None:
        url = await group.endpoint.start()
        client = runtime.redis_client(load_settings(env={"REDIS_URL": url}))
        write = client.register_script(WRITE_SCRIPT)
        try:
            assert await write(keys=[key], args=["one"]) == b"OK"
            for value in ("two", "three"):
                demoted = group.primary
                refused_before = demoted.readonly_errors()
                group.failover()
                assert await write(keys=[key], args=[value]) == b"OK"
                assert demoted.readonly_errors() == refused_before + 1
                assert group.primary.admin is not None
                assert group.primary.admin.get(key) == value.encode()
        finally:
            await group.endpoint.close()

    aloop.run_until_complete(scenario())


def test_without_the_failover_retry_the_caller_gets_readonly(
    aloop: asyncio.AbstractEventLoop, group: ReplicationGroup
) -> None:
    # The control: a client with redis-py's default retry (connection errors and
    # timeouts only) fails on the same failover, so the tests above do see one.
    key = f"test:failover:{uuid.uuid4().hex[:10]}"

    async def scenario() -> None:
        url = await group.endpoint.start()
        client = aioredis.Redis.from_url(url)
        try:
            await client.set(key, "before")
            group.failover()
            with pytest.raises(ReadOnlyError):
                await client.set(key, "after")
        finally:
            await client.aclose()
            await group.endpoint.close()

    aloop.run_until_complete(scenario())


# --- AUTH token --------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield


def create_secret(value: str) -> str:
    client = boto3.client("secretsmanager", region_name=REGION)
    answer = client.create_secret(Name=f"cordum-redis-{uuid.uuid4().hex}", SecretString=value)
    return str(answer["ARN"])


def token() -> str:
    # The punctuation ElastiCache accepts in a token, so none of it is mangled on the way.
    return "Cordum-!&#$^<>" + uuid.uuid4().hex


def test_the_token_is_read_from_secrets_manager_once(aws: None, fresh_runtime: None) -> None:
    # Given the token in a secret, and the functions' settings naming it
    value = token()
    arn = create_secret(value)
    cfg = load_settings(env={"REDIS_URL": "rediss://cache.example:6379",
                             "REDIS_AUTH_SECRET_ARN": arn})
    # When the client is built, then it authenticates with that token over TLS
    client = runtime.redis_client(cfg)
    assert client.connection_pool.connection_kwargs["password"] == value
    assert client.connection_pool.connection_class is aioredis.SSLConnection
    # And a client built again in the same process (after a reset) does not read
    # the secret again: the secret is gone, the token is still known
    boto3.client("secretsmanager", region_name=REGION).delete_secret(
        SecretId=arn, ForceDeleteWithoutRecovery=True)
    runtime.reset()
    again = runtime.redis_client(cfg)
    assert again.connection_pool.connection_kwargs["password"] == value


def test_an_unreadable_secret_names_the_variable(aws: None) -> None:
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:missing-AbCdEf"
    cfg = load_settings(env={"REDIS_URL": "rediss://cache.example:6379",
                             "REDIS_AUTH_SECRET_ARN": arn})
    with pytest.raises(ConfigError, match=r"REDIS_AUTH_SECRET_ARN: .*ResourceNotFoundException"):
        runtime.redis_auth_token(cfg)


def test_a_literal_token_wins_and_is_kept_out_of_reprs() -> None:
    value = token()
    never_read = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:never-read-AbCdEf"
    cfg = load_settings(env={"REDIS_URL": "rediss://cache.example:6379",
                             "REDIS_AUTH_TOKEN": value, "REDIS_AUTH_SECRET_ARN": never_read})
    assert runtime.redis_auth_token(cfg) == value
    assert value not in repr(cfg)


@pytest.mark.parametrize("var", ["REDIS_AUTH_TOKEN", "REDIS_AUTH_SECRET_ARN"])
def test_a_token_is_never_sent_without_tls(var: str) -> None:
    # Given a plain redis:// URL and a token, then the settings refuse to start
    with pytest.raises(ConfigError, match=f"{var}: .*rediss://"):
        load_settings(env={"REDIS_URL": "redis://cache.example:6379", var: "x" * 32})
    # And rediss:// or a local unix socket are fine
    assert load_settings(env={"REDIS_URL": "unix:///run/redis.sock", var: "x" * 32})


# --- TLS + AUTH end to end ---------------------------------------------------------------


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca_key, ca_cert = make_ca("cordum redis test ca")
    cert, key = make_server_cert(ca_key, ca_cert)
    files = {"ca": ca_cert.public_bytes(serialization.Encoding.PEM), "cert": cert, "key": key}
    for name, data in files.items():
        (tmp_path / f"{name}.pem").write_bytes(data)
    return {name: tmp_path / f"{name}.pem" for name in files}


@pytest.fixture
def tls_node(tmp_path: Path, pki: dict[str, Path]) -> Iterator[tuple[RedisNode, str]]:
    """A redis-server speaking TLS only, requiring an AUTH token."""
    value = token()
    node = RedisNode(
        tmp_path / "tls", "--tls-cert-file", str(pki["cert"]), "--tls-key-file", str(pki["key"]),
        "--tls-ca-cert-file", str(pki["ca"]), "--tls-auth-clients", "no",
        "--requirepass", value, tls=True,
    )
    probe = redis.Redis(port=node.port, password=value, ssl=True, ssl_ca_certs=str(pki["ca"]),
                        socket_timeout=2)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                if node.process.poll() is not None:
                    pytest.skip("this redis-server has no TLS support")
                assert time.monotonic() < deadline, "TLS redis-server did not start"
                time.sleep(0.05)
    finally:
        probe.close()
    yield node, value
    node.stop()


def test_the_client_connects_with_tls_and_the_token_from_the_secret(
    aws: None, aloop: asyncio.AbstractEventLoop, pki: dict[str, Path],
    tls_node: tuple[RedisNode, str], fresh_runtime: None,
) -> None:
    node, value = tls_node
    url = f"rediss://127.0.0.1:{node.port}?ssl_ca_certs={pki['ca']}"
    # Given the token only in Secrets Manager
    cfg = load_settings(env={"REDIS_URL": url, "REDIS_AUTH_SECRET_ARN": create_secret(value)})

    async def scenario() -> Any:
        # When the process's client talks to the server, then it is admitted
        client = runtime.redis_client(cfg)
        await client.set("test:tls", "ok")
        got = await client.get("test:tls")
        # And a client without the token is not
        anonymous = aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))
        try:
            with pytest.raises(AuthenticationError):
                await anonymous.ping()
        finally:
            await anonymous.aclose()
        return got

    assert aloop.run_until_complete(scenario()) == b"ok"


def test_nats_credentials_come_from_their_secret(aws: None) -> None:
    # Given a secured NATS cluster's credentials in a secret
    creds = ("-----BEGIN NATS USER JWT-----\neyJ0" + uuid.uuid4().hex
             + "\n------END NATS USER JWT------\n")
    arn = create_secret(creds)
    cfg = load_settings(env={"NATS_CREDS_SECRET_ARN": arn})
    # Then every NATS connection of ours is given them
    options = runtime.nats_options(cfg)
    assert options["user_credentials"] == creds
    # And without the setting nothing is added (no AWS call at all)
    assert runtime.nats_options(load_settings(env={})) == {}
    missing = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:gone-AbCdEf"
    with pytest.raises(ConfigError, match=r"NATS_CREDS_SECRET_ARN: .*ResourceNotFoundException"):
        runtime.nats_options(load_settings(env={"NATS_CREDS_SECRET_ARN": missing}))
