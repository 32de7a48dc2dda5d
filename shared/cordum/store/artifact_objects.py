"""Large artifacts in S3: the presigned URLs a client uploads and downloads through,
and the bounded read a worker makes of one.

The gateway never carries a large artifact's bytes (a Lambda request or answer holds
6 MB at most): it signs a PUT for the client to upload with, and a GET for a reader.
Signing is local (no S3 call). URLs are signed with SigV4, which signs the
``Content-Length`` and ``Content-Type`` of a PUT: S3 refuses an upload of any other
size or type than the one recorded in the artifact's metadata.

The client comes from :func:`cordum.aws.client` (endpoints from ``AWS_ENDPOINT_URL``
and ``AWS_ENDPOINT_URL_S3``, as LocalStack sets them), re-made with SigV4 (botocore
would otherwise sign presigned URLs with SigV2 in some regions, which signs no size).
"""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from cordum import aws

UPLOAD_EXPIRY_S = 900
"""How long an upload URL may be used: 15 minutes."""
DOWNLOAD_EXPIRY_S = 300
"""How long a download URL may be used: 5 minutes."""


class ObjectReadError(RuntimeError):
    """The object could not be read (missing, too large, S3 out of reach)."""


@functools.cache
def signing_client() -> Any:
    """The process's S3 client, SigV4 (path-style addressing behind a custom endpoint)."""
    import boto3
    from botocore.config import Config

    base = aws.client("s3")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    extra = Config(signature_version="s3v4",
                   s3={"addressing_style": "path"} if endpoint else {})
    return boto3.client("s3", region_name=base.meta.region_name, endpoint_url=endpoint or None,
                        config=base.meta.config.merge(extra))


def expires_at(seconds: int) -> str:
    when = datetime.now(UTC) + timedelta(seconds=seconds)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def presign_upload(bucket: str, key: str, *, content_type: str, size_bytes: int,
                   client: Any = None) -> dict[str, Any]:
    """How to upload the object: ``{url, method, headers, expires_at}``. The headers
    (Content-Type, Content-Length) must be sent as given: they are signed."""
    s3 = client or signing_client()
    url = s3.generate_presigned_url(
        "put_object",
        Params={"Bucket": bucket, "Key": key, "ContentType": content_type,
                "ContentLength": size_bytes},
        ExpiresIn=UPLOAD_EXPIRY_S)
    return {"url": url, "method": "PUT",
            "headers": {"Content-Type": content_type, "Content-Length": str(size_bytes)},
            "expires_at": expires_at(UPLOAD_EXPIRY_S)}


def presign_download(bucket: str, key: str, *, client: Any = None) -> dict[str, str]:
    """``{url, expires_at}`` of a GET of the object."""
    s3 = client or signing_client()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                    ExpiresIn=DOWNLOAD_EXPIRY_S)
    return {"url": url, "expires_at": expires_at(DOWNLOAD_EXPIRY_S)}


def read_object(bucket: str, key: str, max_bytes: int, *, client: Any = None) -> bytes:
    """The object's bytes, when at most ``max_bytes``: one GET (its size checked from the
    answer's length before the body is read)."""
    s3 = client or aws.client("s3")
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
    except Exception as exc:
        raise ObjectReadError(f"s3://{bucket}/{key}: {type(exc).__name__}: {exc}") from exc
    size = int(answer.get("ContentLength") or 0)
    body = answer["Body"]
    try:
        if size > max_bytes:
            raise ObjectReadError(f"s3://{bucket}/{key}: {size} bytes, more than {max_bytes}")
        data: bytes = body.read(max_bytes + 1)
    finally:
        body.close()
    if len(data) > max_bytes:
        raise ObjectReadError(f"s3://{bucket}/{key}: more than {max_bytes} bytes")
    return data
