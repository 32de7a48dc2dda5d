"""The floor of the bridge's SQS call: SendMessageBatch from a bare boto3 client.

The bridge sends with its own client (``cordum.bus.sqs.SqsClient``: SQS's JSON
protocol over asyncio streams, signed with botocore's SigV4). The least that
call can cost is the same call made by a plain ``boto3.client("sqs")`` (the
same JSON protocol, botocore's defaults) against the same endpoint, with the
same number of entries of the same shape: a real packet from sys.job.submit
when one goes by within ``--packet-wait`` seconds, as ``cordum.bus.queue``
wraps it (base64 body, subject / job_id / bus_msg_id attributes).

The calls go to a scratch queue created here with the attributes of the queue
named by ``--like`` (the submit queue), and deleted at the end: the submit
queue itself has the submit function behind it.

When. The bridge sends a job the moment its packet is on the bus, which is
while the emulator is still finishing the gateway's invocation of that job (the
API Gateway answer, the function's logs): a call made then waits for the
emulator's one process. Measured on the local stack at 5 jobs/s, a bare boto3
call made at a random moment took 6.7 ms (p50), the same call made when a
packet appeared on sys.job.submit 23.2 ms. So with ``--on-packet`` (what the
benchmark uses beside its load) each call starts when a packet arrives on
sys.job.submit, as the bridge's does: the same call at the same moment. Packets
that arrive while a call is in flight are skipped. Without it: one call every
``--interval`` seconds (jittered by half), the emulator's idle cost. Either way
until ``--calls`` calls were made or stdin closes (the benchmark runs this
beside its load and closes the pipe when the load is over); then one JSON
document on stdout: ``{"samples": [[epoch s, ms], ...], "batch", "packet",
"timing", ...}``. A separate process, so that the benchmark's own threads
(taps, MONITOR, HTTP clients) do not slow the floor down.

In turn with the floor's calls (the next packet, or before and after each
timed call) the same call goes through the bridge's client, ``SqsClient``, on
an event loop of its own with nothing else on it: ``ours_alone``, a reference
that tells the client's cost from what the bridge around it adds. Run:

    python -m tests.bench.sqs_floor --endpoint URL --like QUEUE_URL --calls 50
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import queue as queue_mod
import random
import sys
import threading
import time
from typing import Any

COPIED_ATTRIBUTES = ("DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod",
                     "ReceiveMessageWaitTimeSeconds", "VisibilityTimeout",
                     "SqsManagedSseEnabled", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds")
WARM_UP_CALLS = 5


def first_packet(nats_url: str, wait_s: float) -> bytes | None:
    """The first packet published on sys.job.submit within ``wait_s`` seconds."""
    import nats

    async def grab() -> bytes | None:
        nc = await nats.connect(nats_url, name="cordum-bench-sqs-floor")
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Any) -> None:
            if not got.done():
                got.set_result(msg.data)

        await nc.subscribe("sys.job.submit", cb=on_msg)
        try:
            return await asyncio.wait_for(got, wait_s)
        except TimeoutError:
            return None
        finally:
            await nc.close()

    return asyncio.run(grab())


class PacketTimer:
    """Signals each packet published on sys.job.submit, from a thread of its own."""

    def __init__(self, nats_url: str) -> None:
        self.arrivals: queue_mod.SimpleQueue[float] = queue_mod.SimpleQueue()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(nats_url,), daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self, nats_url: str) -> None:
        import nats

        async def listen() -> None:
            nc = await nats.connect(nats_url, name="cordum-bench-sqs-floor-timer")

            async def on_msg(_msg: Any) -> None:
                self.arrivals.put(time.perf_counter())

            await nc.subscribe("sys.job.submit", cb=on_msg)
            self._ready.set()
            while not self._stop.is_set():
                await asyncio.sleep(0.05)
            await nc.close()

        asyncio.run(listen())

    def next_packet(self, stop: threading.Event) -> bool:
        """Wait for a packet that arrives from now on; False once ``stop`` is set."""
        while True:  # what arrived during the last call is skipped
            try:
                self.arrivals.get_nowait()
            except queue_mod.Empty:
                break
        while not stop.is_set():
            try:
                self.arrivals.get(timeout=0.2)
                return True
            except queue_mod.Empty:
                continue
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def entries(packet: bytes, batch: int) -> list[dict[str, Any]]:
    """``batch`` SendMessageBatch entries of the packet, shaped as the bridge's."""
    from cordum.bus.queue import queue_message

    out = []
    for i in range(batch):
        qm = queue_message(i, "sys.job.submit", packet, stream="CORDUM_JOBS", seq=1_000_000 + i)
        out.append({"Id": qm.id, "MessageBody": qm.body, "MessageAttributes": {
            name: {"DataType": "String", "StringValue": value}
            for name, value in qm.attributes.items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="the SQS endpoint (LocalStack)")
    parser.add_argument("--like", required=True, help="queue URL whose attributes to copy")
    parser.add_argument("--batch", type=int, default=1, help="entries per call (1..10)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between calls")
    parser.add_argument("--calls", type=int, default=0, help="stop after this many (0: on EOF)")
    parser.add_argument("--nats", default="", help="take a real packet from sys.job.submit")
    parser.add_argument("--packet-wait", type=float, default=30.0)
    parser.add_argument("--packet-b64", default="", help="the packet to send, base64")
    parser.add_argument("--on-packet", action="store_true",
                        help="start each call when a packet arrives on sys.job.submit "
                             "(needs --nats), as the bridge's calls start")
    args = parser.parse_args(argv)

    import boto3
    from botocore.credentials import Credentials

    from cordum.bus.sqs import SqsClient

    stop = threading.Event()
    if not args.calls:
        def watch_stdin() -> None:
            sys.stdin.read()  # returns at EOF: the benchmark closed the pipe
            stop.set()

        threading.Thread(target=watch_stdin, daemon=True).start()

    packet, source = None, "given"
    if args.packet_b64:
        packet = base64.b64decode(args.packet_b64)
    elif args.nats:
        packet, source = first_packet(args.nats, args.packet_wait), "sys.job.submit"
    if packet is None:
        # Stand-in of an echo job's size; said so in the output.
        packet, source = os.urandom(420), "synthetic (no packet seen)"

    sqs = boto3.client("sqs", endpoint_url=args.endpoint, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    like = sqs.get_queue_attributes(QueueUrl=args.like, AttributeNames=["All"])["Attributes"]
    attributes = {k: like[k] for k in COPIED_ATTRIBUTES if k in like}
    queue = sqs.create_queue(QueueName=f"cordum-bench-sqs-floor-{os.getpid()}",
                             Attributes=attributes)["QueueUrl"]
    params = {"QueueUrl": queue, "Entries": entries(packet, args.batch)}
    samples: list[list[float]] = []
    ours_alone: list[float] = []
    failed = 0
    loop = asyncio.new_event_loop()
    ours = SqsClient(args.endpoint, "us-east-1", Credentials("test", "test"))

    async def our_call() -> float:
        t0 = time.perf_counter()
        await ours.call("SendMessageBatch", params)
        return (time.perf_counter() - t0) * 1000

    timer = PacketTimer(args.nats) if args.on_packet and args.nats else None
    try:
        for _ in range(WARM_UP_CALLS):  # connection, endpoint and model caches
            sqs.send_message_batch(**params)
            loop.run_until_complete(our_call())
        tick = 0
        while not stop.is_set() and (not args.calls or len(samples) < args.calls):
            tick += 1
            if timer is not None:
                if not timer.next_packet(stop):
                    break
                if tick % 2:  # every other packet: our client, at the same moment
                    ours_alone.append(loop.run_until_complete(our_call()))
                    continue
            elif tick % 2:
                ours_alone.append(loop.run_until_complete(our_call()))
            started, t0 = time.time(), time.perf_counter()
            answer = sqs.send_message_batch(**params)
            ms = (time.perf_counter() - t0) * 1000
            if answer.get("Failed"):
                failed += 1
            else:
                samples.append([started, ms])
            if timer is None:
                if tick % 2 == 0:
                    ours_alone.append(loop.run_until_complete(our_call()))
                stop.wait(args.interval * random.uniform(0.5, 1.5))
    finally:
        if timer is not None:
            timer.close()
        sqs.delete_queue(QueueUrl=queue)
        loop.run_until_complete(ours.close())
        loop.close()
    json.dump({"samples": samples, "ours_alone": ours_alone, "batch": args.batch,
               "failed": failed,
               "timing": "on each packet on sys.job.submit" if timer is not None
               else f"every {args.interval} s (jittered by half)",
               "packet": source, "packet_bytes": len(packet),
               "packet_b64": base64.b64encode(packet).decode(),
               "queue_attributes": attributes,
               "client": f"boto3 {boto3.__version__}, botocore defaults"}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
