"""``cordum-safety-kernel``: CAP's SafetyKernel gRPC service.

This release loads config/safety.yaml (so a broken file is reported at start
and the policy snapshot is the file's hash) but ALLOWS EVERY JOB: rule
evaluation is not implemented yet. Every answer says so in its reason.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.agent.v1 import safety_pb2, safety_pb2_grpc
from cordum.config import DEFAULT_SAFETY_KERNEL_ADDR, load_settings, load_yaml

log = logging.getLogger("cordum.safety.kernel")

ALLOW_ALL_RULE = "allow-all"
ALLOW_ALL_REASON = "allow-all kernel: policy evaluation is not enabled in this release"


class Policy:
    """The loaded safety.yaml and its snapshot id (content hash)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = path.read_bytes()
        load_yaml(path)  # parse errors surface at start, with the file name
        self.snapshot = "sha256:" + hashlib.sha256(data).hexdigest()[:16]


class AllowAllKernel(safety_pb2_grpc.SafetyKernelServicer):
    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def _allow(self) -> safety_pb2.PolicyCheckResponse:
        return safety_pb2.PolicyCheckResponse(
            decision=safety_pb2.DECISION_TYPE_ALLOW,
            reason=ALLOW_ALL_REASON,
            rule_id=ALLOW_ALL_RULE,
            policy_snapshot=self._policy.snapshot,
        )

    def Check(self, request, context):  # noqa: N802 (gRPC method names)
        return self._allow()

    def Evaluate(self, request, context):  # noqa: N802
        return self._allow()

    def Explain(self, request, context):  # noqa: N802
        return self._allow()

    def Simulate(self, request, context):  # noqa: N802
        return self._allow()

    def ListSnapshots(self, request, context):  # noqa: N802
        return safety_pb2.ListSnapshotsResponse(snapshots=[self._policy.snapshot])


def serve(addr: str, policy: Policy) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    safety_pb2_grpc.add_SafetyKernelServicer_to_server(AllowAllKernel(policy), server)
    if server.add_insecure_port(addr) == 0:
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
    cfg = load_settings()
    policy = Policy(cfg.config_dir / "safety.yaml")
    server = serve(args.addr, policy)
    log.info("listening on %s, policy %s (%s); ALLOWING EVERY JOB", args.addr, policy.path,
             policy.snapshot)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    log.info("stopped")


if __name__ == "__main__":
    main()
