"""A DLQ retry is a new submission by whoever retries it, never by the original submitter:
otherwise an admin could retry someone else's gated job and then approve it themselves."""

from __future__ import annotations

import json

from cordum import runtime
from tests.integration.test_gateway_dlq import api  # noqa: F401  (fixture)


def test_a_retried_job_is_submitted_by_the_retrier(api):  # noqa: F811
    # Given a failed job that "alice" submitted
    job_id = api.failed_job()
    # When the admin key of "bob" retries it
    status, body = api.call("POST", f"/api/v1/dlq/{job_id}/retry")
    assert status == 200, body
    new_id = body["job_id"]
    api.jobs.append(new_id)
    # Then the new job, its stored request included, names bob as its submitter
    meta = {k.decode(): v.decode() for k, v in
            runtime.run(api.redis.hgetall(f"job:meta:{new_id}")).items()}
    request = json.loads(runtime.run(api.redis.get(f"job:req:{new_id}")))
    assert meta["principal"] == "bob", meta
    assert request.get("principalId") == "bob", request
