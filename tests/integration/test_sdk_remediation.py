"""cordum-sdk 0.1.0's ``jobs.remediate_job`` against POST /api/v1/jobs/{id}/remediate,
over HTTP to a loopback server that hands each request to the gateway function, on the
real Redis, NATS and safety kernel (the policy and gateway of
tests/integration/test_gateway_remediation.py).

The answer is the client's own ``SubmitJobResponse``; the job detail the client reads
carries the offers (``safety_remediations``) among its additional properties.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.models import JobDetail, RemediateJobBody, SubmitJobResponse
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import AuthorizationError, NotFoundError

from tests.integration.test_gateway_remediation import (
    RemediationGateway,
    remediation_gateway,
    remediation_kernel,
)
from tests.sdk_loopback import loopback_gateway


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with remediation_kernel(tmp_path_factory) as pair:
        yield pair


@pytest.fixture
def gw(unique, served, monkeypatch) -> Iterator[RemediationGateway]:
    with remediation_gateway(unique, *served, monkeypatch) as g:
        yield g


@pytest.fixture
def client(gw) -> Iterator[CordumClient]:
    with loopback_gateway() as url:
        c = CordumClient(url, gw.keys["user"], tenant_id=gw.tenant,
                         retry_policy=RetryPolicy(max_retries=0))
        try:
            yield c
        finally:
            c.close()


def test_remediate_job_parses_the_new_jobs_ids(gw, client):
    original = gw.denied()
    detail = client.jobs.get_job(original)
    assert isinstance(detail, JobDetail)
    offers = detail.additional_properties["safety_remediations"]
    assert [o["id"] for o in offers] == ["use-safe", "still-bad", "forger"]

    got = client.jobs.remediate_job(original, body=RemediateJobBody(remediation_id="use-safe"))

    assert isinstance(got, SubmitJobResponse)
    assert got.job_id and got.job_id != original
    assert got.trace_id == gw.meta(original)["trace_id"]
    assert gw.stored_request(got.job_id).labels["remediation_of"] == original


def test_remediate_job_errors_reach_the_client(gw, client):
    original = gw.denied()
    with pytest.raises(NotFoundError):
        client.jobs.remediate_job(original, body=RemediateJobBody(remediation_id="nope"))
    with pytest.raises(AuthorizationError):  # still denied: a 403 as on a submit
        client.jobs.remediate_job(original, body=RemediateJobBody(remediation_id="still-bad"))
