"""``cordum-safety-kernel``: the process serving the safety kernel.

One gRPC server on ``--addr`` (default ``SAFETY_KERNEL_ADDR``) carries CAP's
SafetyKernel service (:mod:`cordum.safety.kernel_service`) and our output policy
service (:mod:`cordum.safety.output_service`), both answering from
``<config dir>/safety.yaml``, hot-reloaded (:mod:`cordum.safety.policy_file`), merged
with the policy bundles in Redis when ``REDIS_URL`` is set, re-read on NATS
``sys.config.changed`` (with ``NATS_URL``) and every
``SAFETY_POLICY_RELOAD_INTERVAL_S`` (:mod:`cordum.safety.live_policy`).
TLS from the ``SAFETY_KERNEL_TLS_*`` variables (:mod:`cordum.safety.tls`); velocity
windows in Redis when ``REDIS_URL`` is set (:mod:`cordum.safety.velocity`).
With ``CORDUM_POLICY_URI`` set (the AWS stack), the policy is first copied from that
S3 object into the config dir (:mod:`cordum.safety.policy_source`); the process exits
non-zero, before serving, when it cannot be read.
SIGTERM / SIGINT stop it with a 5 s grace.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from concurrent import futures
from typing import TYPE_CHECKING

import grpc

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.agent.v1 import safety_pb2_grpc
from cordum.config import DEFAULT_SAFETY_KERNEL_ADDR, ConfigError, load_settings
from cordum.safety.bundles import CONFIG_CHANGED_SUBJECT
from cordum.safety.config_changes import ConfigChangeListener
from cordum.safety.kernel_service import MAX_METADATA_BYTES, PolicyKernel
from cordum.safety.live_policy import BundleReload, LivePolicy, RedisPolicyDocs
from cordum.safety.output_service import add_output_policy_service
from cordum.safety.policy_file import POLICY_FILE_NAME, Policy
from cordum.safety.policy_source import POLICY_URI_ENV, fetch_policy
from cordum.safety.tls import server_tls_from_env
from cordum.safety.velocity import (
    RedisVelocityCounter,
    VelocityCounter,
    VelocityWindows,
    kernel_redis_from_env,
)

if TYPE_CHECKING:
    from cordum.safety.kernel_service import PolicyInForce
    from cordum.safety.tls import ServerTLS

log = logging.getLogger("cordum.safety.kernel")

DEFAULT_TOPIC_RULE = "default-topic-allow"
"""The rule of the shipped config/safety.yaml that allows job.default and job.echo."""

MAX_CONNECTION_AGE_S = 60.0
"""gRPC closes (GOAWAY) each client connection after about this long (gRPC adds up
to 10 % of jitter), and the client opens a new one, which the load balancer may send
to another task. Clients keep one HTTP/2 connection per channel: without an age, a
task added by a scale-out or a deploy gets only clients that start after it. 60 s
spreads the load within a minute, for one TLS handshake a minute per client
container."""
MAX_CONNECTION_AGE_JITTER = 0.1
"""gRPC core's jitter on the age: +/- 10 %."""
MAX_CONNECTION_AGE_GRACE_S = 35.0
"""After the GOAWAY, calls already running on the old connection get this long to
finish: the longest deadline a client gives a check, the output content check's 30 s
(cordum.safety.output_client CONTENT_TIMEOUT_S), plus 5 s for the answer to travel.
A connection therefore lives at most 60 x 1.1 + 35 = 101 s; the load balancer's
deregistration delay is longer (cordum_infra.safety_kernel), so a draining task's
connections end this way, not cut under a running check."""


def server_options(*, max_connection_age_s: float = MAX_CONNECTION_AGE_S,
                   max_connection_age_grace_s: float = MAX_CONNECTION_AGE_GRACE_S,
                   ) -> list[tuple[str, int]]:
    """The kernel's gRPC server options: metadata bounds and the connection age."""
    return [
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.max_connection_age_ms", round(max_connection_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", round(max_connection_age_grace_s * 1000)),
    ]


def serve(addr: str, policy: PolicyInForce | PolicyKernel, *, tls: ServerTLS | None = None,
          options: list[tuple[str, int]] | None = None) -> grpc.Server:
    """Start the SafetyKernel (and output policy) service on ``addr``; TLS only when
    ``tls`` is given; gRPC options :func:`server_options` unless ``options``."""
    kernel = policy if isinstance(policy, PolicyKernel) else PolicyKernel(policy)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         options=server_options() if options is None else options)
    safety_pb2_grpc.add_SafetyKernelServicer_to_server(kernel, server)
    # The output policy (our own service: CAP has none) is served from the same
    # process and the same policy file.
    add_output_policy_service(server, kernel.policy)
    if tls is None:
        port = server.add_insecure_port(addr)
    else:
        port = server.add_secure_port(addr, tls.credentials())
    if port == 0:
        raise SystemExit(f"safety kernel: cannot listen on {addr}")
    server.start()
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cordum-safety-kernel")
    parser.add_argument("--addr", default=os.environ.get("SAFETY_KERNEL_ADDR",
                                                         DEFAULT_SAFETY_KERNEL_ADDR))
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        cfg = load_settings()
        tls = server_tls_from_env()
        policy_uri = os.environ.get(POLICY_URI_ENV, "").strip()
        if policy_uri:
            # Before anything is served: the file the kernel loads and hot-reloads.
            fetch_policy(policy_uri, cfg.config_dir / POLICY_FILE_NAME)
        redis = kernel_redis_from_env(os.environ)
        velocity: VelocityWindows = (VelocityCounter() if redis is None
                                     else RedisVelocityCounter(redis))
        # The file, merged with the policy bundles in Redis (none without REDIS_URL).
        policy = LivePolicy(Policy(cfg.config_dir / POLICY_FILE_NAME),
                            None if redis is None else RedisPolicyDocs(redis),
                            reload=BundleReload.from_env())
        kernel = PolicyKernel(policy, velocity=velocity)
    except ConfigError as exc:
        raise SystemExit(f"safety kernel: {exc}") from exc
    policy.start()
    # Only with NATS_URL set: the default URL would be retried for ever where no NATS
    # runs (the periodic read alone is then enough to stay within one interval).
    listener = (ConfigChangeListener(cfg, policy.notify)
                if os.environ.get("NATS_URL", "").strip() and redis is not None else None)
    if listener is not None:
        listener.start()
    server = serve(args.addr, kernel, tls=tls)
    log.info("listening on %s (%s), policy %s (%s), bundles %s, decision cache %s, "
             "velocity %s", args.addr, "tls" if tls else "plaintext", policy.path,
             policy.snapshot,
             f"read every {policy.reload.interval_s:g}s"
             + (" and on " + CONFIG_CHANGED_SUBJECT if listener else "")
             if redis is not None else "off (no REDIS_URL)",
             f"{kernel.cache.ttl_s:g}s" if kernel.cache else "off",
             "shared in redis" if isinstance(kernel.velocity, RedisVelocityCounter)
             else "per process")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    if listener is not None:
        listener.close()
    policy.close()
    log.info("stopped")


if __name__ == "__main__":
    main()
