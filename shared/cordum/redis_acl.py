"""Redis ACL users: one per kind of client, each allowed only what that client does.

With one shared password, a worker could rewrite any job's meta, approve a job or
empty the DLQ. A worker (Cordum's CAP contract, and the echo worker here) only
reads its job's context (``GET ctx:<id>``, the pointer it was sent) and writes its
result (``SET res:<id> ... EX``): its user is allowed exactly that. The control
plane's users keep the whole keyspace but lose the commands that reconfigure or
wipe a server (``-@dangerous``: FLUSHALL, CONFIG, DEBUG, KEYS ...), none of which
Cordum sends. The safety kernel only counts velocity windows under its prefix and
reads the policy bundles' document. The
live event stream reads any key (job metas and results) and writes only its
per-tenant event logs under ``cordum:stream:``.

The same users exist on ElastiCache (cordum_infra.cache_users, RBAC) and on the
local stack's Redis (localstack.services, ``ACL SETUSER`` at start), so a worker
is refused the same way in both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AclUser:
    name: str
    rules: str
    """Redis ACL rules (``ACL SETUSER`` words, also an ElastiCache access string)."""


FUNCTIONS = AclUser("cordum-functions", "on ~* +@all -@dangerous")
"""Gateway, submit, result, workflow and tick functions: every job key, no admin."""
BRIDGE = AclUser("cordum-bridge", "on ~* +@all -@dangerous")
"""The NATS bridge: dedup marks, pool flushes, the job metas it reads."""
KERNEL = AclUser("cordum-kernel",
                 "on ~cordum:safety:velocity:* %R~cfg:system:policy -@all +@read +@write "
                 "+@scripting +time +ping -@dangerous")
"""The safety kernel: its velocity windows (cordum.safety.velocity), and a read of the
policy bundles' document (cordum.safety.bundles.POLICY_DOC_KEY, written by the
gateway); nothing else."""
WORKERS = AclUser("cordum-worker", "on %R~ctx:* %R~art:* %W~res:* -@all +get +set +ping")
"""Every worker: read a context payload and an artifact it names (its content and
metadata), write a result payload; nothing else."""

STREAM = AclUser("cordum-stream",
                 "on %R~* ~cordum:stream:* ~cordum:stream-seen:* -@all +@read +evalsha "
                 "+script|load +xadd +xtrim +expire +set +time +ping +@connection "
                 "-@dangerous")
"""The live event stream (cordum.stream): reads job metas and results anywhere
(``%R~*``); writes only its per-tenant event logs (``cordum:stream:*``) and their
written-once marks (``cordum:stream-seen:*``), through its append script (EVALSHA,
SCRIPT LOAD, the script's XADD/XTRIM/EXPIRE/SET/TIME); no other write, no admin
command (KEYS, CLIENT KILL and the like are ``@dangerous``)."""

USERS = (FUNCTIONS, BRIDGE, KERNEL, WORKERS, STREAM)


def setuser_args(user: AclUser, password: str) -> list[str]:
    """``ACL SETUSER`` arguments that (re)create ``user`` from scratch with ``password``:
    ``reset`` first, so rules of an earlier start do not linger."""
    return [user.name, "reset", f">{password}", *user.rules.split()]
