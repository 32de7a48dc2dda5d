"""The emulator's artifacts bucket (large artifacts, cordum_infra.artifacts), for ``make up``."""

from __future__ import annotations

ARTIFACT_BUCKET = "cordum-artifacts-local"
"""Created by ``up``, named to the stack by context ``artifactBucket`` (an AWS stack
creates its own): the gateway signs uploads and downloads for it."""


def ensure_artifact_bucket(localstack_url: str) -> str:
    """The emulator's artifacts bucket, created unless it exists.

    The emulator keeps nothing across restarts while Redis does: the metadata of an
    artifact uploaded before a restart outlives its object, and a read of it answers a
    download URL that finds nothing (404 from the emulator) until the metadata expires."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=localstack_url, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    try:
        s3.head_bucket(Bucket=ARTIFACT_BUCKET)
    except Exception:
        s3.create_bucket(Bucket=ARTIFACT_BUCKET)
    return ARTIFACT_BUCKET
