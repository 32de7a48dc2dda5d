"""The faults the chaos suite injects (see chaos.py), one function each.

Each takes the :class:`Target` (what it may break and how to reach it) and returns
when the fault is over, with the ids of any jobs it submitted itself (the duplicate
deliveries) and notes for the report. Nothing here waits for recovery: the suite
measures that.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processes import alive, answers  # localstack/processes.py

PAUSE_S = 6.0
"""How long a paused part stays paused (the issue's Redis pause)."""


@dataclass
class Server:
    """A Redis or NATS server the suite started itself, so it may stop and restart it."""

    name: str
    argv: list[str]
    port: int
    log: Path
    pid: int = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = proc.pid
        deadline = time.monotonic() + 20
        while not answers("127.0.0.1", self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not come up on port {self.port}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.pid:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)
        self.pid = 0

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


@dataclass
class Target:
    redis: Server
    nats: Server
    values: dict[str, str]
    outputs: dict[str, str]
    child_pid: Callable[[str], int]
    """The pid of a supervised service's current process (0 when none runs)."""
    redis_client: Any
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)


Fault = Callable[[Target], list[str]]


def redis_pause(t: Target) -> list[str]:
    t.redis.signal(signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        t.redis.signal(signal.SIGCONT)
    return []


def redis_restart(t: Target) -> list[str]:
    """SIGTERM (Redis writes its AOF and exits), then the same server on the same files,
    with its ACL users made again under the same passwords: ElastiCache keeps a node's
    users across its restart, and ``ACL SETUSER`` is not in the AOF (without this
    every client but the default user is refused from here on)."""
    from services import ensure_redis_users  # localstack/services.py

    t.redis.stop()
    time.sleep(1.0)
    t.redis.start()
    ensure_redis_users(t.values["REDIS_URL"], t.values)
    return []


def nats_restart(t: Target) -> list[str]:
    """NATS stopped and started again on the same JetStream store."""
    t.nats.stop()
    time.sleep(1.0)
    t.nats.start()
    return []


def _kill(t: Target, name: str) -> None:
    pid = t.child_pid(name)
    if not pid:
        raise RuntimeError(f"{name} is not running: nothing to kill")
    os.kill(pid, signal.SIGKILL)
    t.note(f"{name} pid {pid} killed")


def bridge_kill(t: Target) -> list[str]:
    _kill(t, "bridge")
    return []


def kernel_kill(t: Target) -> list[str]:
    _kill(t, "safety-kernel")
    return []


def worker_kill(t: Target) -> list[str]:
    """The echo worker killed while jobs run on it (the load's jobs sleep 3 s there)."""
    time.sleep(2.0)
    _kill(t, "echo-worker")
    return []


def kernel_slow(t: Target) -> list[str]:
    """The kernel stops answering for a while: every check runs past its deadline."""
    pid = t.child_pid("safety-kernel")
    if not pid:
        raise RuntimeError("safety-kernel is not running: nothing to slow down")
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    return []


def lambda_kill(t: Target) -> list[str]:
    """Runtime processes of the submit and result functions killed mid-batch, three
    times over a few seconds (the executor starts new ones on the next invoke)."""
    killed = 0
    for _ in range(3):
        for pid in _runtimes(("submit", "result")):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(2.0)
    t.note(f"{killed} Lambda runtime processes killed")
    return []


def _runtimes(functions: tuple[str, ...]) -> list[int]:
    """Pids of Lambda runtime processes whose function name contains one of ``functions``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"AWS_LAMBDA_FUNCTION_NAME="):
                name = item.split(b"=", 1)[1].decode(errors="replace").lower()
                if any(f in name for f in functions):
                    found.append(int(entry.name))
                break
    return found


def lock_expiry(t: Target) -> list[str]:
    """Job locks vanish under their holders (as if each expired mid-operation) for a
    few seconds: every job lock key is deleted as soon as it is seen."""
    from cordum.store.locks import JOB_LOCK_PREFIX

    deleted = 0
    end = time.monotonic() + PAUSE_S
    while time.monotonic() < end:
        keys = list(t.redis_client.scan_iter(match=f"{JOB_LOCK_PREFIX}*", count=500))
        if keys:
            deleted += t.redis_client.delete(*keys)
        time.sleep(0.02)
    t.note(f"{deleted} job locks deleted under their holders")
    return []


def _job_packet(t: Target, job_id: str) -> bytes:
    from cordum import protocol

    body = {"prompt": f"duplicate delivery {job_id}", "topic": "job.echo", "tenant_id": "default"}
    t.redis_client.set(protocol.context_key(job_id), json.dumps(body), ex=3600)
    req = protocol.JobRequest(job_id=job_id, topic="job.echo", priority=2,
                              context_ptr=protocol.pointer(protocol.context_key(job_id)),
                              tenant_id="default", principal_id="chaos")
    req.meta.tenant_id = "default"
    return protocol.packet(trace_id=job_id, sender_id="chaos",
                           job_request=req).SerializeToString()


def duplicate_sqs(t: Target) -> list[str]:
    """Each of 5 job requests sent to the submit queue twice (as SQS may deliver)."""
    import boto3

    from cordum.bus.queue import queue_message

    sqs = boto3.client("sqs", endpoint_url=t.values["LOCALSTACK_URL"], region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    ids = [f"chaos-sqs-{uuid.uuid4().hex[:12]}" for _ in range(5)]
    for job_id in ids:
        msg = queue_message(0, "sys.job.submit", _job_packet(t, job_id))
        attrs = {k: {"DataType": "String", "StringValue": v} for k, v in msg.attributes.items()}
        for _ in range(2):
            sqs.send_message(QueueUrl=t.outputs["SubmitQueueUrl"], MessageBody=msg.body,
                             MessageAttributes=attrs)
    return ids


def duplicate_jetstream(t: Target) -> list[str]:
    """Each of 5 job requests published twice on the submit stream under two message
    ids (a publisher retrying after a lost ack, past JetStream's de-duplication)."""
    import asyncio

    import nats

    ids = [f"chaos-js-{uuid.uuid4().hex[:12]}" for _ in range(5)]

    async def publish() -> None:
        nc = await nats.connect(t.values["NATS_URL"])
        js = nc.jetstream()
        for job_id in ids:
            data = _job_packet(t, job_id)
            for copy in range(2):
                await js.publish("sys.job.submit", data,
                                 headers={"Nats-Msg-Id": f"{job_id}-{copy}"})
        await nc.close()

    asyncio.run(publish())
    return ids


def all_together(t: Target) -> list[str]:
    """Every kill at once while Redis is paused, then NATS restarted."""
    t.redis.signal(signal.SIGSTOP)
    try:
        for name in ("bridge", "safety-kernel"):
            _kill(t, name)
        for pid in _runtimes(("submit", "result")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(3.0)
    finally:
        t.redis.signal(signal.SIGCONT)
    nats_restart(t)
    return []


FAULTS: dict[str, tuple[Fault, str]] = {
    "redis-pause": (redis_pause, f"Redis paused {PAUSE_S:.0f} s (SIGSTOP, SIGCONT)"),
    "redis-restart": (redis_restart, "Redis restarted on its AOF (appendfsync always)"),
    "nats-restart": (nats_restart, "NATS restarted on its JetStream store"),
    "bridge-kill": (bridge_kill, "the NATS->SQS bridge killed (SIGKILL)"),
    "kernel-kill": (kernel_kill, "the safety kernel killed (SIGKILL)"),
    "worker-kill": (worker_kill, "the echo worker killed mid-job (SIGKILL; jobs sleep 3 s)"),
    "lambda-kill": (lambda_kill, "submit and result Lambda runtimes killed mid-batch"),
    "duplicate-sqs": (duplicate_sqs, "the same SQS message delivered twice (5 jobs)"),
    "duplicate-jetstream": (duplicate_jetstream,
                            "the same job request twice on JetStream (5 jobs)"),
    "lock-expiry": (lock_expiry, f"job locks expiring mid-operation for {PAUSE_S:.0f} s"),
    "kernel-slow": (kernel_slow, f"the safety kernel answering past its deadline "
                                 f"for {PAUSE_S:.0f} s"),
    "all-together": (all_together, "all at once: Redis paused, bridge, kernel and "
                                   "Lambda runtimes killed, then NATS restarted"),
}
"""Name -> (the fault, what it does, for the report), in the order the suite runs them."""
