"""The local stack's Redis users (make up: localstack.services.ensure_redis_users):
the echo worker connects as the workers' ACL user, runs jobs end to end, and that
user is refused a job's meta while its result write goes through."""

from __future__ import annotations

import os
import urllib.parse
import uuid

import pytest
import redis

from tests.e2e.conftest import _env_file

WORKER_URL = "REDIS_CORDUM_WORKER_URL"


@pytest.fixture(scope="module")
def worker_url() -> str:
    url = os.environ.get(WORKER_URL) or _env_file().get(WORKER_URL)
    if not url:
        pytest.fail(f"{WORKER_URL} missing from .cordum/local.env: run make up again")
    return url


def test_echo_worker_runs_jobs_as_the_workers_user(stack, worker_url) -> None:
    # Given the stack's echo worker, connected with the workers' user
    admin = redis.Redis.from_url(stack.redis_url)
    worker_user = urllib.parse.urlsplit(worker_url).username
    clients = admin.client_list()
    assert any(c.get("user") == worker_user for c in clients), "no client as the worker user"
    # When a job is submitted, then it still succeeds: the worker read ctx: and wrote res:
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "acl"})
    assert status in (200, 201, 202), body
    job = stack.wait_terminal(body["job_id"])
    assert job["state"] == "SUCCEEDED", job


def test_workers_user_is_refused_a_job_meta_but_writes_results(stack, worker_url) -> None:
    admin = redis.Redis.from_url(stack.redis_url)
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "meta"})
    assert status in (200, 201, 202), body
    job_id = body["job_id"]
    stack.wait_terminal(job_id)
    worker = redis.Redis.from_url(worker_url)
    # When the workers' user tries to rewrite the job's meta, then Redis says NOPERM
    with pytest.raises(redis.exceptions.NoPermissionError):
        worker.hset(f"job:meta:{job_id}", "state", "FAILED")
    with pytest.raises(redis.exceptions.NoPermissionError):
        worker.set(f"job:meta:{job_id}", "FAILED")
    assert admin.hget(f"job:meta:{job_id}", "state") == b"SUCCEEDED"
    # And a result write under res: works
    probe = f"res:acl-e2e-{uuid.uuid4().hex}"
    try:
        assert worker.set(probe, "{}", ex=60) is True
    finally:
        admin.delete(probe)
