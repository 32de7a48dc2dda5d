"""The Redis database the integration and security suites own: what a local stack or an
earlier run left in the server's other databases (db 0 above all) never changes a test.

The first import of ``tests.conftest.REDIS_URL`` in a process claims a database of the
server at ``REDIS_URL`` (db 9, else the next free one up to 15; ``CORDUM_TEST_REDIS_DB``
names exactly one) and empties it; the process empties it again when it exits. Key names
stay Cordum's: only the database differs.

A claimed database holds ``OWNER_KEY``, naming the process (``<host>:<pid>``) while it
runs and ``free`` after. A database is claimed only when it is empty, free, or its owner
was a process of this host that is gone: two sessions running side by side each get
their own, and a database someone else fills is never touched.
"""

from __future__ import annotations

import atexit
import os
import socket
from urllib.parse import urlsplit, urlunsplit

import redis

OWNER_KEY = "cordum-tests:owner"
"""Not a Cordum key: no scan of the code under test matches it."""
FREE = "free"
CANDIDATES = range(9, 16)
DB_ENV = "CORDUM_TEST_REDIS_DB"

_claimed: list[str] = []
"""The URL this process claimed (at most one)."""


def with_db(url: str, db: int) -> str:
    """``url`` pointing at database ``db`` (any database it named replaced)."""
    parts = urlsplit(url)
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", query, parts.fragment))


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _gone(owner: str) -> bool:
    """Whether ``owner`` (``<host>:<pid>``) was a process of this host that has ended."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _take(client: redis.Redis, me: str) -> bool:
    """Empty the database and own it, when it is free to take (atomically: WATCH)."""
    with client.pipeline() as pipe:
        try:
            pipe.watch(OWNER_KEY)
            raw = pipe.get(OWNER_KEY)
            owner = raw.decode() if isinstance(raw, bytes) else raw
            if owner is None and pipe.dbsize():
                return False  # someone else's data
            if owner not in (None, FREE, me) and not _gone(owner):
                return False  # a live session's
            pipe.multi()
            pipe.flushdb()
            pipe.set(OWNER_KEY, me)
            pipe.execute()
            return True
        except redis.WatchError:
            return False


def claim(server_url: str) -> str:
    """The URL of a database of this process's own on ``server_url``'s server, emptied
    (the same one on every call); emptied again and left ``free`` at exit."""
    if _claimed:
        return _claimed[0]
    named = os.environ.get(DB_ENV, "").strip()
    candidates = [int(named)] if named else list(CANDIDATES)
    me = _me()
    for db in candidates:
        url = with_db(server_url, db)
        client = redis.Redis.from_url(url, socket_connect_timeout=5)
        try:
            if _take(client, me):
                _claimed.append(url)
                atexit.register(release)
                return url
        except redis.ConnectionError:
            # No server: the tests that need it fail on their own, each saying so.
            return url
        finally:
            client.close()
    raise RuntimeError(
        f"no Redis database of the tests' own at {server_url}: databases "
        f"{', '.join(map(str, candidates))} hold other data or a running session's; "
        f"set {DB_ENV} to a free one")


def release() -> None:
    """Empty the claimed database and leave it free (only while it is still ours)."""
    if not _claimed:
        return
    client = redis.Redis.from_url(_claimed.pop(), socket_connect_timeout=5)
    try:
        with client.pipeline() as pipe:
            pipe.watch(OWNER_KEY)
            raw = pipe.get(OWNER_KEY)
            if (raw.decode() if isinstance(raw, bytes) else raw) != _me():
                return
            pipe.multi()
            pipe.flushdb()
            pipe.set(OWNER_KEY, FREE)
            pipe.execute()
    except redis.RedisError:
        pass  # the next claim empties it
    finally:
        client.close()
