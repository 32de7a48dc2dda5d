"""cordumctl's artifact commands against a stub API: put inline or through a presigned
upload (the key never sent to it), get with and without --out (S3-held content fetched
through its download URL), the list (one page, or every page with --all), memory reads,
and the refusals' exit codes."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import httpx
import pytest

from cordumctl.commands.artifacts import INLINE_MAX_BYTES
from cordumctl.errors import ExitCode
from tests.cordumctl_stub import API_KEY, StubApi, error, reply, run_cli

ARTIFACTS = "/api/v1/artifacts"
UPLOADS = "/api/v1/artifacts/uploads"
MEMORY = "/api/v1/memory"
PTR = "redis://art:0b7e1c52-1111-4222-8333-444455556666"
S3_URL = "https://s3.test/cordum-artifacts/artifacts/standard/0b7e1c52?X-Amz-Signature=abc"
S3_PATH = "/cordum-artifacts/artifacts/standard/0b7e1c52"
MADE = {"artifact_ptr": PTR, "size_bytes": 5, "content_type": "application/json",
        "retention": "standard", "storage": "redis", "expires_at": "2026-01-08T00:00:00Z"}


def test_a_small_file_is_sent_inline_with_its_type_retention_and_labels(tmp_path: Path) -> None:
    doc = tmp_path / "report.json"
    doc.write_bytes(b'{"a":')
    api = StubApi().on("POST", ARTIFACTS, reply(200, MADE))
    result = run_cli(api, "-o", "table", "artifacts", "put", str(doc), "--retention", "AUDIT",
                     "-l", "team=blue")
    assert result.code == 0, result.err
    sent = api.body("POST", ARTIFACTS)
    assert base64.b64decode(sent["content_base64"]) == b'{"a":'
    assert sent["content_type"] == "application/json" and sent["retention"] == "audit"
    assert sent["labels"] == {"team": "blue"}
    assert PTR in result.out and "redis" in result.out
    assert not api.sent("POST", UPLOADS)


def test_stdin_is_read_with_the_given_content_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from stdin")))
    api = StubApi().on("POST", ARTIFACTS, reply(200, MADE))
    result = run_cli(api, "artifacts", "put", "-", "--content-type", "text/plain")
    assert result.code == 0, result.err
    sent = api.body("POST", ARTIFACTS)
    assert base64.b64decode(sent["content_base64"]) == b"from stdin"
    assert sent["content_type"] == "text/plain"
    assert result.json()["artifact_ptr"] == PTR


def test_a_large_file_is_uploaded_to_its_presigned_url_without_the_key(tmp_path: Path) -> None:
    size = INLINE_MAX_BYTES + 10
    big = tmp_path / "video.bin"
    big.write_bytes(b"v" * size)
    target = {"url": S3_URL, "method": "PUT",
              "headers": {"Content-Type": "application/octet-stream",
                          "Content-Length": str(size)},
              "expires_at": "2026-01-01T00:15:00Z"}
    api = StubApi().on("POST", UPLOADS, reply(200, {**MADE, "size_bytes": size,
                                                    "storage": "s3", "upload": target}))
    api.on("PUT", S3_PATH, reply(200, {}))
    result = run_cli(api, "artifacts", "put", str(big))
    assert result.code == 0, result.err
    assert api.body("POST", UPLOADS) == {"size_bytes": size,
                                         "content_type": "application/octet-stream",
                                         "retention": "standard", "labels": {}}
    [upload] = api.sent("PUT", S3_PATH)
    assert upload.url.host == "s3.test" and upload.url.params["X-Amz-Signature"] == "abc"
    assert upload.headers["Content-Length"] == str(size)
    assert upload.headers["Content-Type"] == "application/octet-stream"
    assert "X-API-Key" not in upload.headers and API_KEY not in str(upload.headers)
    assert upload.read() == b"v" * size
    shown = result.json()
    assert shown["storage"] == "s3" and "upload" not in shown
    assert not api.sent("POST", ARTIFACTS)


def test_a_refused_upload_fails_naming_s3s_answer(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (INLINE_MAX_BYTES + 1))
    api = StubApi().on("POST", UPLOADS, reply(200, {**MADE, "upload": {
        "url": S3_URL, "method": "PUT", "headers": {}}}))
    api.on("PUT", S3_PATH, httpx.Response(403, text="<Error><Code>SignatureDoesNotMatch"
                                                      "</Code></Error>"))
    result = run_cli(api, "artifacts", "put", str(big))
    assert result.code == ExitCode.ERROR
    assert "upload failed: S3 answered 403" in result.err
    assert "SignatureDoesNotMatch" in result.err


def test_bad_arguments_and_refusals_exit_with_their_codes(tmp_path: Path) -> None:
    doc = tmp_path / "a.txt"
    doc.write_text("x")
    api = StubApi()
    assert run_cli(api, "artifacts", "put", str(doc), "--retention", "forever").code == \
        ExitCode.USAGE
    assert run_cli(api, "artifacts", "put", str(tmp_path / "nope")).code == ExitCode.USAGE
    (tmp_path / "empty").write_bytes(b"")
    assert run_cli(api, "artifacts", "put", str(tmp_path / "empty")).code == ExitCode.USAGE
    assert run_cli(api, "artifacts", "put", str(doc), "-l", "novalue").code == ExitCode.USAGE
    assert not api.requests
    too_big = StubApi().on("POST", ARTIFACTS, error(413, "artifact too large",
                                                    "payload_too_large"))
    result = run_cli(too_big, "artifacts", "put", str(doc))
    assert result.code == ExitCode.INVALID and "artifact too large" in result.err


DETAIL = {"artifact_ptr": PTR, "content_base64": base64.b64encode(b"\x00bytes").decode(),
          "metadata": {"content_type": "application/octet-stream", "size_bytes": 6,
                       "created_at": "2026-01-01T00:00:00Z", "retention": "short",
                       "labels": {"tenant_id": "default"}, "storage": "redis"}}


def _detail_path() -> str:
    return f"{ARTIFACTS}/{PTR}"


def test_get_shows_the_metadata_and_writes_the_content_with_out(tmp_path: Path) -> None:
    api = StubApi().on("GET", _detail_path(), reply(200, DETAIL))
    shown = run_cli(api, "-o", "table", "artifacts", "get", PTR)
    assert shown.code == 0, shown.err
    assert "short" in shown.out and "tenant_id=default" in shown.out
    assert "redis%3A%2F%2Fart%3A" in api.requests[0].url.raw_path.decode()
    target = tmp_path / "out.bin"
    result = run_cli(api, "artifacts", "get", PTR, "--out", str(target))
    assert result.code == 0, result.err
    assert target.read_bytes() == b"\x00bytes"
    assert f"wrote 6 bytes to {target}" in result.err


def test_an_s3_held_artifact_is_downloaded_through_its_url(tmp_path: Path) -> None:
    detail = {**DETAIL, "metadata": {**DETAIL["metadata"], "storage": "s3",  # type: ignore[dict-item]
                                     "size_bytes": 3 * 1024 * 1024},
              "download_url": S3_URL}
    del detail["content_base64"]
    api = StubApi().on("GET", _detail_path(), reply(200, detail))
    api.on("GET", S3_PATH, httpx.Response(200, content=b"s" * (3 * 1024 * 1024)))
    target = tmp_path / "dl.bin"
    result = run_cli(api, "artifacts", "get", PTR, "-O", str(target))
    assert result.code == 0, result.err
    assert target.read_bytes() == b"s" * (3 * 1024 * 1024)
    [download] = api.sent("GET", S3_PATH)
    assert "X-API-Key" not in download.headers
    gone = StubApi().on("GET", _detail_path(), reply(200, detail))
    gone.on("GET", S3_PATH, httpx.Response(404, text="NoSuchKey"))
    failed = run_cli(gone, "artifacts", "get", PTR, "-O", str(tmp_path / "x"))
    assert failed.code == ExitCode.ERROR and "download failed: S3 answered 404" in failed.err


def test_get_of_a_missing_artifact_exits_not_found() -> None:
    api = StubApi().on("GET", _detail_path(), error(404, "artifact not found", "not_found"))
    result = run_cli(api, "artifacts", "get", PTR)
    assert result.code == ExitCode.NOT_FOUND and "artifact not found" in result.err


LISTED = {"artifact_ptr": PTR, "id": PTR.removeprefix("redis://art:"),
          "content_type": "text/plain", "size_bytes": 5, "retention": "short",
          "storage": "redis", "created_at": "2026-01-01T00:00:00.000Z",
          "expires_at": "2026-01-02T00:00:00.000Z", "labels": {"tenant_id": "default"}}
OLDER = {**LISTED, "artifact_ptr": "redis://art:older", "id": "older", "storage": "s3"}


def test_list_reads_one_page_or_every_page_with_all() -> None:
    api = StubApi().on("GET", ARTIFACTS,
                       reply(200, {"items": [LISTED], "next_cursor": "c1"}),
                       reply(200, {"items": [OLDER], "next_cursor": None}))
    result = run_cli(api, "artifacts", "list", "--all", "--limit", "1")
    assert result.code == 0, result.err
    assert [a["artifact_ptr"] for a in result.json()] == [PTR, "redis://art:older"]
    first, second = api.sent("GET", ARTIFACTS)
    assert dict(first.url.params) == {"limit": "1"}
    assert dict(second.url.params) == {"limit": "1", "cursor": "c1"}
    one = StubApi().on("GET", ARTIFACTS, reply(200, {"items": [LISTED], "next_cursor": "c1"}))
    table = run_cli(one, "-o", "table", "artifacts", "list")
    assert table.code == 0, table.err
    assert len(one.requests) == 1 and dict(one.requests[0].url.params) == {"limit": "50"}
    assert table.out.split()[:5] == ["ARTIFACT", "SIZE", "CONTENT", "TYPE", "STORAGE"]
    assert PTR in table.out and "short" in table.out
    empty = StubApi().on("GET", ARTIFACTS, reply(200, {"items": [], "next_cursor": None}))
    assert "no artifacts" in run_cli(empty, "-o", "table", "artifacts", "list").out
    assert run_cli(StubApi(), "artifacts", "list", "--limit", "0").code == ExitCode.USAGE
    bad = StubApi().on("GET", ARTIFACTS, error(400, "cursor is not a next_cursor of this "
                                                    "list", "INVALID_CURSOR"))
    assert run_cli(bad, "artifacts", "list").code == ExitCode.INVALID


def test_memory_reads_a_pointer_or_a_key_and_shows_its_text() -> None:
    found = {"pointer": "redis://ctx:j1", "key": "ctx:j1", "kind": "context",
             "size_bytes": 17, "base64": base64.b64encode(b'{"prompt": "hi"}').decode(),
             "text": '{"prompt": "hi"}', "json": {"prompt": "hi"}}
    api = StubApi().on("GET", MEMORY, reply(200, found))
    table = run_cli(api, "-o", "table", "artifacts", "memory", "redis://ctx:j1")
    assert table.code == 0, table.err
    assert "context" in table.out and '{"prompt": "hi"}' in table.out
    assert dict(api.requests[-1].url.params) == {"ptr": "redis://ctx:j1"}
    as_json = run_cli(api, "artifacts", "memory", "res:j1")
    assert json.loads(as_json.out)["json"] == {"prompt": "hi"}
    assert dict(api.requests[-1].url.params) == {"key": "res:j1"}
    refused = StubApi().on("GET", MEMORY, error(400, "unsupported pointer key",
                                                "unsupported_pointer"))
    assert run_cli(refused, "artifacts", "memory", "job:meta:x").code == ExitCode.INVALID
    withheld = StubApi().on("GET", MEMORY, error(403, "not shown", "output_withheld"))
    assert run_cli(withheld, "artifacts", "memory", "res:j1").code == ExitCode.AUTH
