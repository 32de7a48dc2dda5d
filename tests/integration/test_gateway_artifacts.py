"""The artifact and memory routes through the gateway on the real Redis: inline artifacts
made and read back under each way of naming them, their retention TTLs, the bad bodies,
the S3 upload path (presigned with moto: no S3 call is made by the gateway), and the
memory read of a job's context, result (its redacted copy after a REDACT) and artifacts."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs, quote, urlsplit

import boto3
import pytest
from moto import mock_aws

from cordum import runtime
from cordum.store.artifacts import MAX_UPLOAD_BYTES, content_key, meta_key
from cordum.store.jobs import JobState
from tests.artifacts_world import BUCKET, World, final


@pytest.fixture
def world(unique: str, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(unique, monkeypatch)


@pytest.fixture
def s3_world(unique: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    with mock_aws():
        world = World(unique, monkeypatch, bucket=BUCKET)
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        yield world, s3
    World.reset()


def _id(ptr: str) -> str:
    assert ptr.startswith("redis://art:"), ptr
    return ptr.removeprefix("redis://art:")


def test_an_inline_artifact_is_read_back_however_its_pointer_is_written(world: World) -> None:
    made = world.put(b"\x00\x01binary\xff", content_type="application/x-test",
                     labels={"purpose": "demo"})
    ptr = made["artifact_ptr"]
    assert made["size_bytes"] == 9 and made["storage"] == "redis"
    assert made["retention"] == "standard" and made["content_type"] == "application/x-test"
    art_id = _id(ptr)
    for path in (ptr, f"art:{art_id}", art_id, quote(ptr, safe="")):
        status, body = world.call("GET", f"/api/v1/artifacts/{path}", key=world.viewer)
        assert status == 200, (path, body)
        assert body["artifact_ptr"] == ptr
        assert base64.b64decode(body["content_base64"]) == b"\x00\x01binary\xff"
        meta = body["metadata"]
        assert meta["content_type"] == "application/x-test" and meta["size_bytes"] == 9
        assert meta["retention"] == "standard" and meta["storage"] == "redis"
        assert meta["labels"] == {"purpose": "demo", "tenant_id": world.tenant}
        assert meta["created_at"].endswith("Z")
        assert "download_url" not in body


@pytest.mark.parametrize(("retention", "days"), [("short", 1), ("standard", 7), ("AUDIT", 30),
                                                 (None, 7)])
def test_each_retention_class_sets_its_ttl(world: World, retention: str | None,
                                           days: int) -> None:
    fields = {"retention": retention} if retention is not None else {}
    art_id = _id(world.put("x", content_type="text/plain", **fields)["artifact_ptr"])
    for key in (content_key(art_id), meta_key(art_id)):
        ttl = runtime.run(world.redis.ttl(key))
        assert days * 86400 - 60 < ttl <= days * 86400


def test_plain_text_content_is_taken_as_cordum_does(world: World) -> None:
    status, made = world.call("POST", "/api/v1/artifacts", {"content": "héllo"},
                              key=world.user)
    assert status == 200, made
    assert made["size_bytes"] == len("héllo".encode())
    assert made["content_type"] == "application/octet-stream"
    status, body = world.memory(made["artifact_ptr"])
    assert status == 200
    assert body["kind"] == "artifact" and body["text"] == "héllo"


@pytest.mark.parametrize(("body", "code", "names"), [
    ({"content_type": "text/plain"}, "content_required", "content_base64"),
    ({"content_base64": "", "content": ""}, "content_required", "content_base64"),
    ({"content_base64": "not base64!"}, "invalid_base64", "content_base64"),
    ({"content": "x", "retention": "forever"}, "invalid_request", "retention"),
    ({"content": "x", "labels": {f"k{i}": "v" for i in range(33)}}, "invalid_request",
     "labels"),
    ({"content": "x", "content_type": "text/plain\n"}, "invalid_request", "content_type"),
    ({"content": "x", "labels": ["a"]}, "invalid_request", "labels"),
])
def test_a_bad_body_is_400_naming_the_field(world: World, body: dict[str, object],
                                            code: str, names: str) -> None:
    status, answer = world.call("POST", "/api/v1/artifacts", body)
    assert status == 400, answer
    assert answer["code"] == code and names in answer["error"]


def test_a_read_only_role_reads_but_does_not_make_artifacts(world: World) -> None:
    status, body = world.call("POST", "/api/v1/artifacts", {"content": "x"}, key=world.viewer)
    assert (status, body["code"]) == (403, "forbidden")
    ptr = world.put("x", key=world.user)["artifact_ptr"]
    assert world.call("GET", f"/api/v1/artifacts/{ptr}", key=world.viewer)[0] == 200


def test_uploads_without_a_bucket_answer_a_clear_400(world: World) -> None:
    status, body = world.call("POST", "/api/v1/artifacts/uploads",
                              {"size_bytes": 10 * 1024 * 1024, "content_type": "video/mp4"})
    assert status == 400
    assert body["code"] == "artifact_uploads_unavailable"
    assert "CORDUM_ARTIFACT_BUCKET" in body["error"]


def test_an_upload_is_a_presigned_put_bound_to_its_size_and_type(s3_world) -> None:  # type: ignore[no-untyped-def]
    world, s3 = s3_world
    size = 10 * 1024 * 1024
    status, made = world.call("POST", "/api/v1/artifacts/uploads", {
        "size_bytes": size, "content_type": "video/mp4", "retention": "short"})
    assert status == 200, made
    art_id = _id(made["artifact_ptr"])
    assert made["storage"] == "s3" and made["size_bytes"] == size
    upload = made["upload"]
    assert upload["method"] == "PUT"
    assert upload["headers"] == {"Content-Type": "video/mp4", "Content-Length": str(size)}
    url = urlsplit(upload["url"])
    assert url.path.endswith(f"/{BUCKET}/artifacts/short/{art_id}") or (
        url.netloc.startswith(BUCKET) and url.path == f"/artifacts/short/{art_id}")
    params = parse_qs(url.query)
    assert params["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert params["X-Amz-Expires"] == ["900"]
    assert set(params["X-Amz-SignedHeaders"][0].split(";")) >= {"content-length",
                                                                "content-type", "host"}
    # The metadata is in Redis; no content key is.
    stored = json.loads(runtime.run(world.redis.get(meta_key(art_id))))
    assert stored["tenant"] == world.tenant and stored["bucket"] == BUCKET
    assert stored["object_key"] == f"artifacts/short/{art_id}"
    assert runtime.run(world.redis.exists(content_key(art_id))) == 0
    ttl = runtime.run(world.redis.ttl(meta_key(art_id)))
    assert 86400 - 60 < ttl <= 86400

    # Once uploaded, a read answers a presigned GET of the object (never its bytes).
    s3.put_object(Bucket=BUCKET, Key=f"artifacts/short/{art_id}", Body=b"v" * 16)
    status, body = world.call("GET", f"/api/v1/artifacts/{made['artifact_ptr']}")
    assert status == 200, body
    assert "content_base64" not in body
    assert body["metadata"]["storage"] == "s3" and body["metadata"]["size_bytes"] == size
    link = urlsplit(body["download_url"])
    assert f"artifacts/short/{art_id}" in link.path
    assert parse_qs(link.query)["X-Amz-Expires"] == ["300"]
    status, mem = world.memory(made["artifact_ptr"])
    assert status == 200 and mem["storage"] == "s3" and "base64" not in mem
    assert mem["download_url"].startswith("https://")


def test_upload_sizes_are_bounded(s3_world) -> None:  # type: ignore[no-untyped-def]
    world, _ = s3_world
    status, body = world.call("POST", "/api/v1/artifacts/uploads",
                              {"size_bytes": MAX_UPLOAD_BYTES + 1})
    assert (status, body["code"]) == (413, "payload_too_large")
    for bad in (0, -1, "many"):
        status, body = world.call("POST", "/api/v1/artifacts/uploads", {"size_bytes": bad})
        assert status == 400 and "size_bytes" in body["error"]
    status, body = world.call("POST", "/api/v1/artifacts/uploads", {})
    assert status == 400 and body["error"] == "size_bytes is required"


def test_memory_reads_a_jobs_context_and_result(world: World) -> None:
    job_id = world.job(context={"prompt": "summarise"}, result={"answer": 42})
    for query in ({"ptr": f"redis://ctx:{job_id}"}, {"key": f"ctx:{job_id}"},
                  {"key": f"redis://ctx:{job_id}"}, {"ptr": f"'redis://ctx:{job_id}'"}):
        status, body = world.memory(**query)
        assert status == 200, (query, body)
        assert body["pointer"] == f"redis://ctx:{job_id}" and body["key"] == f"ctx:{job_id}"
        assert body["kind"] == "context" and body["json"] == {"prompt": "summarise"}
        raw = base64.b64decode(body["base64"])
        assert json.loads(raw) == {"prompt": "summarise"} and body["size_bytes"] == len(raw)
    status, body = world.memory(f"res:{job_id}", as_key=world.viewer)
    assert status == 200
    assert body["kind"] == "result" and body["json"] == {"answer": 42}
    assert body["text"] == json.dumps({"answer": 42}) and "redacted" not in body


def test_after_a_redact_the_redacted_copy_is_served(world: World) -> None:
    job_id = world.job(result={"ssn": "123-45-6789"}, redacted={"ssn": "[REDACTED]"},
                       meta={"output_safety": final("REDACT")})
    # The meta's result_ptr names the redacted copy, as the output policy writes it.
    runtime.run(world.redis.hset(f"job:meta:{job_id}", "result_ptr",
                                 f"redis://res:{job_id}:redacted"))
    status, body = world.memory(f"res:{job_id}")
    assert status == 200, body
    assert body["redacted"] is True and body["key"] == f"res:{job_id}:redacted"
    assert body["json"] == {"ssn": "[REDACTED]"}
    assert "123-45" not in json.dumps(body)


def test_large_data_is_answered_in_base64_alone(world: World) -> None:
    big = "y" * (600 * 1024)
    ptr = world.put(big, content_type="text/plain")["artifact_ptr"]
    status, body = world.memory(ptr)
    assert status == 200
    assert body["size_bytes"] == len(big) and "text" not in body and "json" not in body
    assert base64.b64decode(body["base64"]).decode() == big


def test_a_missing_pointer_or_job_is_404_or_400(world: World) -> None:
    assert world.memory(f"ctx:{'nope'}")[0] == 404
    assert world.memory("redis://art:00000000-0000-0000-0000-000000000000")[0] == 404
    status, body = world.call("GET", "/api/v1/memory")
    assert (status, body["code"]) == (400, "missing_pointer")
    status, body = world.memory(ptr="ctx:abc")
    assert (status, body["code"]) == (400, "invalid_pointer")
    pending = world.job(JobState.RUNNING)
    assert world.memory(f"res:{pending}")[0] == 404
