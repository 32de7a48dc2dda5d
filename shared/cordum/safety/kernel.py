"""``cordum-safety-kernel``: CAP's SafetyKernel gRPC service.

Answers from config/safety.yaml (see :mod:`cordum.safety.policy` for the rules):

- ``Check`` / ``Evaluate``: the decision; velocity windows count the request.
- ``Simulate``: the same decision without side effects (velocity is looked at, not
  counted; nothing is cached).
- ``Explain``: like Simulate, with a reason naming what decided and why every other
  rule did not.
- ``ListSnapshots``: snapshots loaded by this process, the current one first.

Simulate and Explain answer from the loaded policy, or from a candidate policy sent
as the YAML text of binary metadata ``cordum-policy-bin`` (see
:func:`candidate_metadata`). A candidate is parsed for that one call and never
replaces the loaded policy; the answer carries the candidate's snapshot. A candidate
that does not parse is INVALID_ARGUMENT naming the field. Metadata of up to
:data:`MAX_METADATA_BYTES` is accepted.

Hot reload: the file's stat (mtime, size, inode) is compared at most once per
``check_interval_s`` when a call arrives. A file that no longer parses keeps the
last good policy (and its snapshot) in force and is logged once per change.

Decision cache: ``SAFETY_DECISION_CACHE_TTL`` seconds (``0``/unset: off; ``5``,
``5s``, ``500ms`` accepted). Keyed by the policy snapshot and a hash of every
request field that can change a decision except the job id; emptied when the
snapshot changes. A decision that involved a velocity window, and any THROTTLE, is
never stored, since the same request may be answered differently a moment later.

Velocity windows are shared by every replica through Redis when ``REDIS_URL`` is
set (:mod:`cordum.safety.velocity`). TLS: :mod:`cordum.safety.tls`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.agent.v1 import safety_pb2, safety_pb2_grpc
from cordum.config import DEFAULT_SAFETY_KERNEL_ADDR, ConfigError, load_settings
from cordum.safety.output_service import add_output_policy_service
from cordum.safety.policy import (
    Constraints,
    Decision,
    DecisionKind,
    PolicyError,
    PolicyInput,
    SafetyPolicy,
    VelocityCounter,
    load_policy,
    parse_policy,
)
from cordum.safety.tls import server_tls_from_env
from cordum.safety.velocity import RedisVelocityCounter, velocity_from_env

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from cordum.safety.tls import ServerTLS
    from cordum.safety.velocity import VelocityWindows

log = logging.getLogger("cordum.safety.kernel")

DECISION_CACHE_TTL_ENV = "SAFETY_DECISION_CACHE_TTL"
DECISION_CACHE_MAX_ENV = "SAFETY_DECISION_CACHE_MAX_SIZE"
DEFAULT_DECISION_CACHE_MAX = 10_000
SNAPSHOT_HISTORY = 10
"""How many snapshots ListSnapshots reports."""
CANDIDATE_POLICY_METADATA = "cordum-policy-bin"
"""Binary metadata key carrying a candidate policy's YAML for Simulate / Explain."""
MAX_METADATA_BYTES = 1024 * 1024
"""Metadata the server accepts per call (gRPC's default, 8 KiB, is less than a policy)."""

DEFAULT_TOPIC_RULE = "default-topic-allow"
"""The rule of the shipped config/safety.yaml that allows job.default and job.echo."""
ALLOW_ALL_RULE = DEFAULT_TOPIC_RULE
"""Former name, from when the kernel allowed every job; callers still import it."""

_PROTO_DECISIONS = {
    DecisionKind.ALLOW: safety_pb2.DECISION_TYPE_ALLOW,
    DecisionKind.DENY: safety_pb2.DECISION_TYPE_DENY,
    DecisionKind.REQUIRE_APPROVAL: safety_pb2.DECISION_TYPE_REQUIRE_HUMAN,
    DecisionKind.THROTTLE: safety_pb2.DECISION_TYPE_THROTTLE,
    DecisionKind.ALLOW_WITH_CONSTRAINTS: safety_pb2.DECISION_TYPE_ALLOW_WITH_CONSTRAINTS,
}
_ACTOR_TYPES = {1: "human", 2: "service"}


class Policy:
    """The policy file and the last good :class:`SafetyPolicy` loaded from it.

    Built from a path; a missing or broken file at construction raises
    :class:`~cordum.safety.policy.PolicyError` (a ConfigError naming the file).
    """

    def __init__(self, path: Path, *, check_interval_s: float = 1.0) -> None:
        self.path = path
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._stat = self._stat_of()
        self._current = load_policy(path)
        self._history = [self._current.snapshot]
        self._next_check = time.monotonic() + check_interval_s

    @property
    def current(self) -> SafetyPolicy:
        return self._current

    @property
    def snapshot(self) -> str:
        return self._current.snapshot

    @property
    def snapshots(self) -> list[str]:
        """Snapshots loaded by this process, newest first."""
        return list(self._history)

    def refresh(self) -> SafetyPolicy:
        """The policy in force, reloading first if the file changed."""
        now = time.monotonic()
        if now < self._next_check:
            return self._current
        with self._lock:
            if now < self._next_check:
                return self._current
            self._next_check = now + self.check_interval_s
            stat = self._stat_of()
            if stat == self._stat:
                return self._current
            # Remember the stat even when the load fails: a broken file is reported
            # once, and retried only when it changes again.
            self._stat = stat
            try:
                loaded = load_policy(self.path)
            except ConfigError as exc:
                log.error("policy reload failed, keeping %s: %s", self._current.snapshot, exc)
                return self._current
            if loaded.snapshot != self._current.snapshot:
                log.info("policy reloaded: %s -> %s", self._current.snapshot, loaded.snapshot)
                self._history = [loaded.snapshot,
                                 *(s for s in self._history if s != loaded.snapshot)]
                del self._history[SNAPSHOT_HISTORY:]
            self._current = loaded
            return loaded

    def _stat_of(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


class DecisionCache:
    """TTL cache of responses for one policy snapshot; the oldest entry goes first
    when full, and every entry goes when the snapshot changes."""

    def __init__(self, ttl_s: float, max_size: int = DEFAULT_DECISION_CACHE_MAX, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_size = max_size
        self.hits = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = ""
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, snapshot: str, key: str) -> Any | None:
        """A copy of the stored response, or None (missing, expired, other snapshot)."""
        with self._lock:
            if snapshot != self._snapshot:
                # A reload: nothing decided under the old policy may answer any more.
                self._entries.clear()
                self._snapshot = snapshot
                return None
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[key]
                return None
            self.hits += 1
            response = safety_pb2.PolicyCheckResponse()
            response.CopyFrom(entry[1])
            return response

    def put(self, snapshot: str, key: str, response: Any) -> None:
        stored = safety_pb2.PolicyCheckResponse()
        stored.CopyFrom(response)
        stored.approval_ref = ""
        with self._lock:
            if snapshot != self._snapshot:
                return  # decided under a policy that is no longer the cache's
            self._entries[key] = (self._clock() + self.ttl_s, stored)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)


def cache_ttl_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SAFETY_DECISION_CACHE_TTL`` in seconds; a bad value names the variable."""
    raw = (os.environ if env is None else env).get(DECISION_CACHE_TTL_ENV, "").strip().lower()
    if not raw:
        return 0.0
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        ttl = float(raw) * scale
    except ValueError:
        raise ConfigError(f"{DECISION_CACHE_TTL_ENV}: not a duration: {raw!r}") from None
    if ttl < 0:
        raise ConfigError(f"{DECISION_CACHE_TTL_ENV}: must be >= 0")
    return ttl


def _cache_max_from_env() -> int:
    raw = os.environ.get(DECISION_CACHE_MAX_ENV, "").strip()
    try:
        size = int(raw) if raw else DEFAULT_DECISION_CACHE_MAX
    except ValueError:
        raise ConfigError(f"{DECISION_CACHE_MAX_ENV}: not an integer: {raw!r}") from None
    if size < 1:
        raise ConfigError(f"{DECISION_CACHE_MAX_ENV}: must be >= 1")
    return size


def policy_input(request: Any) -> PolicyInput:
    """The fields of a PolicyCheckRequest that a policy evaluates."""
    meta = request.meta if request.HasField("meta") else None
    tenant = request.tenant.strip() or (meta.tenant_id.strip() if meta is not None else "")
    return PolicyInput(
        topic=request.topic,
        tenant=tenant,
        job_id=request.job_id,
        labels=dict(request.labels),
        capability=meta.capability if meta is not None else "",
        risk_tags=tuple(meta.risk_tags) if meta is not None else (),
        requires=tuple(meta.requires) if meta is not None else (),
        pack_id=meta.pack_id if meta is not None else "",
        actor_id=meta.actor_id if meta is not None else "",
        actor_type=_ACTOR_TYPES.get(meta.actor_type, "") if meta is not None else "",
        input_content=request.input_content,
    )


def to_response(decision: Decision, job_id: str) -> Any:
    response = safety_pb2.PolicyCheckResponse(
        decision=_PROTO_DECISIONS[decision.decision],
        reason=decision.reason,
        rule_id=decision.rule_id,
        policy_snapshot=decision.snapshot,
        approval_required=decision.approval_required,
        approval_ref=job_id if decision.approval_required else "",
    )
    if decision.constraints is not None:
        response.constraints.CopyFrom(_constraints(decision.constraints))
    for rem in decision.remediations:
        response.remediations.add(
            id=rem.id, title=rem.title, summary=rem.summary,
            replacement_topic=rem.replacement_topic,
            replacement_capability=rem.replacement_capability,
            add_labels=rem.add_labels, remove_labels=rem.remove_labels)
    return response


def _constraints(c: Constraints) -> Any:
    return safety_pb2.PolicyConstraints(
        budgets=safety_pb2.BudgetConstraints(**c.budgets.model_dump()),
        sandbox=safety_pb2.SandboxProfile(**c.sandbox.model_dump()),
        toolchain=safety_pb2.ToolchainConstraints(**c.toolchain.model_dump()),
        diff=safety_pb2.DiffConstraints(**c.diff.model_dump()),
        redaction_level=c.redaction_level,
    )


def candidate_metadata(policy_text: str | bytes) -> tuple[tuple[str, bytes]]:
    """gRPC metadata asking Simulate / Explain to answer from ``policy_text``."""
    data = policy_text.encode() if isinstance(policy_text, str) else policy_text
    return ((CANDIDATE_POLICY_METADATA, data),)


class PolicyKernel(safety_pb2_grpc.SafetyKernelServicer):
    """The SafetyKernel servicer: a policy file, its velocity windows, a cache."""

    def __init__(self, policy: Policy, *, cache_ttl_s: float | None = None,
                 velocity: VelocityWindows | None = None) -> None:
        self.policy = policy
        self.velocity: VelocityWindows = velocity or VelocityCounter()
        ttl = cache_ttl_from_env() if cache_ttl_s is None else cache_ttl_s
        self.cache = DecisionCache(ttl, _cache_max_from_env()) if ttl > 0 else None

    def decide(self, request: Any) -> Any:
        """Check/Evaluate: the decision, counting velocity, through the cache."""
        current = self.policy.refresh()
        req = policy_input(request)
        key = ""
        if self.cache is not None:
            key = f"{current.snapshot}:{req.cache_key()}"
            cached = self.cache.get(current.snapshot, key)
            if cached is not None:
                if cached.approval_required:
                    cached.approval_ref = req.job_id
                return cached
        decision = current.evaluate(req, velocity=self.velocity)
        response = to_response(decision, req.job_id)
        if key and decision.cacheable and self.cache is not None:
            self.cache.put(current.snapshot, key, response)
        log.debug("decision %s rule=%s topic=%s tenant=%s job=%s", decision.decision.value,
                  decision.rule_id, req.topic, req.tenant, req.job_id)
        return response

    def Check(self, request, context):  # noqa: N802 (gRPC method names)
        return self.decide(request)

    def Evaluate(self, request, context):  # noqa: N802
        return self.decide(request)

    def Simulate(self, request, context):  # noqa: N802
        req = policy_input(request)
        decision = self._policy_for(context).evaluate(req, velocity=self.velocity,
                                                      dry_run=True)
        return to_response(decision, req.job_id)

    def Explain(self, request, context):  # noqa: N802
        req = policy_input(request)
        decision = self._policy_for(context).explain(req, velocity=self.velocity)
        return to_response(decision, req.job_id)

    def ListSnapshots(self, request, context):  # noqa: N802
        self.policy.refresh()
        return safety_pb2.ListSnapshotsResponse(snapshots=self.policy.snapshots)

    def _policy_for(self, context: Any) -> SafetyPolicy:
        """The candidate sent with the call, else the loaded policy."""
        for key, value in context.invocation_metadata() or ():
            if key == CANDIDATE_POLICY_METADATA:
                data = value if isinstance(value, bytes) else value.encode()
                try:
                    return parse_policy(data, "candidate policy")
                except PolicyError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return self.policy.refresh()


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
        kernel = PolicyKernel(Policy(cfg.config_dir / "safety.yaml"),
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
