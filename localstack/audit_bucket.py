"""The emulator's audit bucket (docs/audit.md, "Export and retention"), for ``make up``."""

from __future__ import annotations

AUDIT_BUCKET = "cordum-audit-local"
"""The emulator's audit bucket (docs/audit.md, "Export and retention"): created by ``up``,
named to the stack by context ``auditBucket`` (an AWS stack creates its own)."""


def ensure_audit_bucket(localstack_url: str, redis_url: str) -> str:
    """The emulator's audit bucket, created (Object Lock on, as on AWS) unless it exists.

    The emulator keeps nothing across restarts while Redis does: a bucket created anew
    holds no export, so the export marks in Redis are dropped with it and the chains are
    exported again from their first entry (docs/local-stack.md)."""
    import boto3
    import redis

    s3 = boto3.client("s3", endpoint_url=localstack_url, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    try:
        s3.head_bucket(Bucket=AUDIT_BUCKET)
    except Exception:
        s3.create_bucket(Bucket=AUDIT_BUCKET, ObjectLockEnabledForBucket=True)
        client = redis.Redis.from_url(redis_url)
        try:
            stale = [key for pattern in ("audit:exported:*", "audit:exporting:*")
                     for key in client.scan_iter(match=pattern, count=1000)]
            if stale:
                client.delete(*stale)
        finally:
            client.close()
    return AUDIT_BUCKET
