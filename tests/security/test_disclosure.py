"""What health, status and the docs page give away.

``/health`` answers anyone: it says which part is down, never an exception text or a
host. ``/api/v1/status`` shows hosts and URLs to admins only. The Swagger UI page
runs scripts from a CDN: each is pinned to a version and an integrity hash, so a
changed file on the CDN is refused by the browser instead of run on our origin.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest

from tests.conftest import NATS_URL
from tests.helpers import call, event, free_port
from tests.security.conftest import ALICE, BOB, configure


def leaks(raw: str, *secrets: str) -> list[str]:
    found = [s for s in secrets if s in raw]
    found += re.findall(r"[A-Za-z]+Error|[Rr]efused|[Cc]onnect(?:ion|ing)|://", raw)
    return found


@pytest.mark.parametrize("path", ["/health", "/api/v1/health"])
def test_health_with_redis_down_names_no_host_or_error(gateway, monkeypatch, path):
    port = free_port()
    configure(monkeypatch, REDIS_URL=f"redis://localhost:{port}/0")
    status, body, _ = call(event("GET", path, key=None if path == "/health" else ALICE))
    assert status == 503, body
    assert body["status"] == "unhealthy", body
    assert (body["redis"], body["nats"]) == ("unavailable", "ok"), body
    assert leaks(json.dumps(body), "localhost", str(port)) == [], body


def test_health_with_nats_down_names_no_host_or_error(gateway, monkeypatch):
    port = free_port()
    configure(monkeypatch, NATS_URL=f"nats://localhost:{port}")
    status, body, _ = call(event("GET", "/health", key=None))
    assert status == 503, body
    assert (body["status"], body["redis"], body["nats"]) == ("unhealthy", "ok", "unavailable")
    assert leaks(json.dumps(body), "localhost", str(port)) == [], body


def test_status_shows_hosts_to_admins_only(gateway, monkeypatch):
    nats = urlsplit(NATS_URL)
    configure(monkeypatch, NATS_URL=f"nats://localhost:{nats.port}")
    status, body, _ = call(event("GET", "/api/v1/status", key=BOB))
    assert status == 200, body
    assert body["redis"] == {"connected": True} and body["nats"] == {"connected": True}, body
    assert leaks(json.dumps(body), "localhost", "127.0.0.1", f":{nats.port}") == [], body
    # An admin still sees where the gateway connects (without credentials).
    status, body, _ = call(event("GET", "/api/v1/status", key=ALICE))
    assert status == 200 and body["nats"]["url"] == f"nats://localhost:{nats.port}", body


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        url = found.get("src") if tag == "script" else found.get("href") if tag == "link" else None
        if url and urlsplit(url).scheme:
            self.tags.append({"tag": tag, **found})


def test_docs_page_pins_every_external_asset_with_integrity(gateway):
    status, page, headers = call(event("GET", "/api/v1/docs", key=None))
    assert status == 200
    parser = _Assets()
    parser.feed(page)
    assert {t["tag"] for t in parser.tags} == {"script", "link"}, parser.tags
    for tag in parser.tags:
        url = str(tag.get("src") or tag.get("href"))
        assert re.search(r"@\d+\.\d+\.\d+/", url), f"unpinned version: {url}"
        assert re.fullmatch(r"sha384-[A-Za-z0-9+/]{64}", tag.get("integrity") or ""), tag
        assert tag.get("crossorigin") == "anonymous", tag
    # And the page may run no script but those and its own inline one.
    policy = headers.get("Content-Security-Policy") or ""
    assert "default-src 'none'" in policy and "script-src" in policy, headers
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0], policy
