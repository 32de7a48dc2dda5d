"""The cost of an audit chain append (cordum.store.audit): the SHA-256 and HMAC-SHA256
in Lua over the previous hash, the seq and the event's digest (which the client computes
and the client's figure includes), beside the floor of a script that writes the same
entry and head unhashed.

On a private redis-server (nothing else on it), for a ~500 B event and for the largest
(16 KiB), each variant appends ``appends`` events in a row, sequentially, ``--runs``
times. Two figures per variant: µs per append seen by the client (one EVALSHA round
trip over loopback) and µs per call spent in Redis (INFO commandstats, evalsha's
usec_per_call): the time the single-threaded server is busy with it. Run:

    python -m tests.bench.bench_audit_append [appends] [--runs 5] [--json PATH]

(with the project's venv and PYTHONPATH=shared:. as ``make`` sets; not part of ``make bench``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from tests.bench.common import cli, emit, figure, private_redis, progress

FLOOR_LUA = """
-- The same reads and writes as audit_append, the hashes left out.
local head = redis.call('GET', KEYS[2])
local seq = 1
if head then seq = tonumber(string.match(head, '^(%d+):')) + 1 end
local h = string.rep('0', 64)
redis.call('XADD', KEYS[1], seq .. '-1', 'seq', seq, 'prev', h, 'hash', h, 'hmac', '',
  'event', ARGV[1])
redis.call('SET', KEYS[2], seq .. ':' .. h)
return {seq, h}
"""

HMAC_KEY = b"k" * 32


def sized_event(tenant: str, size: int) -> Any:
    from cordum.store.audit import AuditEvent, encode_event

    def make(pad: int) -> AuditEvent:
        return AuditEvent(type="approval.approve", severity="HIGH", tenant=tenant,
                          actor="user:alice@example.com", actor_key="key-0123456789",
                          at=time.time_ns() // 1000, job_id="job-0123456789abcdef",
                          reason="r" * pad, extra={"topic": "job.default"})

    base = len(encode_event(make(0)))
    return make(max(0, size - base))


async def server_usec_per_call(redis: aioredis.Redis) -> float:
    stats = await redis.info("commandstats")
    entry = stats.get("cmdstat_evalsha") or {}
    return float(entry.get("usec_per_call", 0.0))


async def measure(url: str, appends: int, runs: int) -> list[dict[str, Any]]:
    from cordum.store.audit import AuditChain, audit_keys, encode_event

    redis = aioredis.Redis.from_url(url)
    floor_script = redis.register_script(FLOOR_LUA)
    plain = AuditChain(redis)
    keyed = AuditChain(redis, HMAC_KEY)
    figures: list[dict[str, Any]] = []
    try:
        for size, label in ((500, "500 B"), (16 * 1024 - 1, "16 KiB")):
            wall: dict[str, list[float]] = {"floor": [], "plain": [], "hmac": []}
            server: dict[str, list[float]] = {"floor": [], "plain": [], "hmac": []}
            for run in range(runs):
                for variant in ("floor", "plain", "hmac"):
                    tenant = f"bench-{variant}-{size}-{run}"
                    event = sized_event(tenant, size)
                    data = encode_event(event)
                    chain = keyed if variant == "hmac" else plain
                    await redis.config_resetstat()
                    t0 = time.perf_counter()
                    for _ in range(appends):
                        if variant == "floor":
                            await floor_script(keys=audit_keys(tenant), args=[data])
                        else:
                            await chain.append(tenant, event)
                    wall[variant].append((time.perf_counter() - t0) * 1e6 / appends)
                    server[variant].append(await server_usec_per_call(redis))
                    await redis.delete(*audit_keys(tenant))
                progress(f"{label} run {run + 1}/{runs}: "
                         + ", ".join(f"{v} {server[v][-1]:.0f} µs" for v in server))
            figures.append(figure(f"audit-floor-{size}", f"bare XADD+SET script, {label} event "
                                  "(Redis time)", "µs/call", server["floor"]))
            for variant, what in (("plain", "append, SHA-256"), ("hmac", "append, SHA-256 + HMAC")):
                figures.append(figure(f"audit-{variant}-{size}", f"{what}, {label} event "
                                      "(Redis time)", "µs/call", server[variant],
                                      floor=server["floor"]))
                figures.append(figure(f"audit-{variant}-{size}-wall", f"{what}, {label} event "
                                      "(client, one round trip)", "µs/append", wall[variant],
                                      floor=wall["floor"]))
    finally:
        await redis.aclose()
    return figures


def main() -> None:
    parser = cli(__doc__ or "")
    parser.add_argument("appends", type=int, nargs="?", default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with private_redis() as url:
        figures = asyncio.run(measure(url, args.appends, args.runs))
    emit(args.json, figures, {"appends": args.appends, "runs": args.runs})


if __name__ == "__main__":
    main()
