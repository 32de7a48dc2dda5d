"""Where the safety kernel's policy comes from at start: an S3 object the stack manages.

On AWS the policy is not baked into the kernel's image: the stack keeps it in its
policy bucket (cordum_infra.kernel_policy) and gives the kernel its location as
``CORDUM_POLICY_URI=s3://<bucket>/<key>``. Before it serves, the kernel copies that
object to ``<config dir>/safety.yaml`` (:func:`fetch_policy`), the file it loads and
hot-reloads as on a local stack, where the variable is unset and the shipped
config/safety.yaml is read in place.

A kernel without its policy must not serve: an object that cannot be read is a
:class:`PolicySourceError` (a ConfigError naming the URI) and the process exits
non-zero, so ECS counts a failed task and a deploy's circuit breaker rolls back
instead of a kernel answering from a stale or missing policy. Errors that may pass
(network, throttling, S3 5xx) are retried a bounded number of times; the ones that
will not (no such bucket or key, access denied, an invalid URI, an oversized
object) fail at once.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cordum.config import ConfigError

log = logging.getLogger("cordum.safety.policy_source")

POLICY_URI_ENV = "CORDUM_POLICY_URI"

FETCH_ATTEMPTS = 4
FETCH_BACKOFF_S = 1.0
"""Four tries, 1, 2 then 4 s apart (7 s of waiting): long enough to ride out an S3
or endpoint hiccup at task start, short enough that a kernel that cannot get its
policy exits in about the 30 s its load balancer gives a new task (cordum_infra
KERNEL_HEALTH_CHECK_GRACE), long before ECS would judge the container itself."""
CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 4.0
"""Per try: S3 through the VPC's gateway endpoint answers a few-KB GET in tens of
milliseconds. With the back-off, a kernel gives up after at most 4 x 6 + 7 = 31 s."""
MAX_POLICY_BYTES = 1024 * 1024
"""The shipped policy is under 4 KB; an object past 1 MiB is no policy file (the
kernel would hold it in memory and parse it on every reload)."""

PERMANENT_CODES = frozenset({
    "NoSuchBucket", "NoSuchKey", "AccessDenied", "AllAccessDisabled", "InvalidBucketName",
    "InvalidObjectState", "403", "404",
})
"""S3 error codes no retry changes (``403`` / ``404``: a HEAD-style answer without a
body names only the status)."""


class PolicySourceError(ConfigError):
    """The policy object could not be read; the message names the URI and why."""


@dataclass(frozen=True, slots=True)
class PolicyLocation:
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse_policy_uri(uri: str) -> PolicyLocation:
    """``s3://bucket/key`` -> its bucket and key; PolicySourceError for anything else."""
    parts = urlsplit(uri.strip())
    key = parts.path.lstrip("/")
    if parts.scheme != "s3" or not parts.netloc or not key or parts.query or parts.fragment:
        raise PolicySourceError(
            f"{POLICY_URI_ENV}: expected s3://<bucket>/<key>, got {uri!r}")
    return PolicyLocation(bucket=parts.netloc, key=key)


def s3_client() -> Any:
    """An S3 client with the per-try timeouts above and no retries of its own (the
    attempts are :func:`fetch_policy`'s, so their number is bounded in one place)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(
        connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
        retries={"total_max_attempts": 1}))


def _error_code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None


def _read(client: Any, where: PolicyLocation) -> bytes:
    answer = client.get_object(Bucket=where.bucket, Key=where.key)
    size = int(answer.get("ContentLength") or 0)
    if size > MAX_POLICY_BYTES:
        raise PolicySourceError(
            f"{POLICY_URI_ENV}: {where.uri} is {size} bytes, over the {MAX_POLICY_BYTES} "
            "a policy file may have")
    body = answer["Body"].read(MAX_POLICY_BYTES + 1)
    if len(body) > MAX_POLICY_BYTES:
        raise PolicySourceError(
            f"{POLICY_URI_ENV}: {where.uri} is over the {MAX_POLICY_BYTES} bytes a "
            "policy file may have")
    return bytes(body)


def _write_atomically(path: Path, content: bytes) -> None:
    """Replace ``path`` in one rename: the hot-reload never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch_policy(uri: str, dest: Path, *, client: Any = None,
                 attempts: int = FETCH_ATTEMPTS, backoff_s: float = FETCH_BACKOFF_S,
                 sleep: Callable[[float], None] = time.sleep) -> Path:
    """Copy the object at ``uri`` to ``dest``; PolicySourceError if it cannot be read.

    Retries what may pass, at most ``attempts`` tries with a doubling back-off from
    ``backoff_s``; a permanent S3 error or an oversized object fails on the first.
    """
    where = parse_policy_uri(uri)
    s3 = client if client is not None else s3_client()
    delay = backoff_s
    for attempt in range(1, attempts + 1):
        try:
            content = _read(s3, where)
        except PolicySourceError:
            raise
        except Exception as exc:  # botocore's ClientError, connection and read errors
            code = _error_code(exc)
            why = f"{type(exc).__name__}: {exc}"
            if code in PERMANENT_CODES or attempt == attempts:
                tries = "" if code in PERMANENT_CODES else f" after {attempt} tries"
                raise PolicySourceError(
                    f"{POLICY_URI_ENV}: cannot read {where.uri}{tries} ({why})") from exc
            log.warning("policy %s: try %d of %d failed (%s); again in %.0f s",
                        where.uri, attempt, attempts, why, delay)
            sleep(delay)
            delay *= 2
            continue
        _write_atomically(dest, content)
        log.info("policy %s: %d bytes written to %s", where.uri, len(content), dest)
        return dest
    raise AssertionError("unreachable: the last attempt returns or raises")
