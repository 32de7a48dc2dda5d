"""``cordum-safety-kernel``: the process serving the safety kernel.

One gRPC server on ``--addr`` (default ``SAFETY_KERNEL_ADDR``) carries CAP's
SafetyKernel service (:mod:`cordum.safety.kernel_service`) and our output policy
service (:mod:`cordum.safety.output_service`), both answering from
``<config dir>/safety.yaml``, hot-reloaded (:mod:`cordum.safety.policy_file`).
TLS from the ``SAFETY_KERNEL_TLS_*`` variables (:mod:`cordum.safety.tls`); velocity
windows in Redis when ``REDIS_URL`` is set (:mod:`cordum.safety.velocity`).
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
from cordum.safety.kernel_service import MAX_METADATA_BYTES, PolicyKernel
from cordum.safety.output_service import add_output_policy_service
from cordum.safety.policy_file import POLICY_FILE_NAME, Policy
from cordum.safety.tls import server_tls_from_env
from cordum.safety.velocity import RedisVelocityCounter, velocity_from_env

if TYPE_CHECKING:
    from cordum.safety.tls import ServerTLS

log = logging.getLogger("cordum.safety.kernel")

DEFAULT_TOPIC_RULE = "default-topic-allow"
"""The rule of the shipped config/safety.yaml that allows job.default and job.echo."""


def serve(addr: str, policy: Policy | PolicyKernel, *,
          tls: ServerTLS | None = None) -> grpc.Server:
    """Start the SafetyKernel (and output policy) service on ``addr``; TLS only when
    ``tls`` is given."""
    kernel = policy if isinstance(policy, PolicyKernel) else PolicyKernel(policy)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
    ])
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
        kernel = PolicyKernel(Policy(cfg.config_dir / POLICY_FILE_NAME),
                              velocity=velocity_from_env(os.environ))
    except ConfigError as exc:
        raise SystemExit(f"safety kernel: {exc}") from exc
    server = serve(args.addr, kernel, tls=tls)
    log.info("listening on %s (%s), policy %s (%s), decision cache %s, velocity %s",
             args.addr, "tls" if tls else "plaintext", kernel.policy.path,
             kernel.policy.snapshot, f"{kernel.cache.ttl_s:g}s" if kernel.cache else "off",
             "shared in redis" if isinstance(kernel.velocity, RedisVelocityCounter)
             else "per process")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    log.info("stopped")


if __name__ == "__main__":
    main()
