"""Tests of what the console's distribution runs at the edge, without a synth of the
stack: the SPA function's logic (run with node), the routes against the local console
server's (localstack/web_console.py), the security headers CloudFront cannot send, the
console's context values and the length of its CloudFront names
(cordum_infra.web_console_edge, cordum_infra.web_console)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# (importing these modules puts infra/cdk on the path: test_synth does)
from tests.infra.test_stream import CERT
from tests.infra.test_web_console import CONSOLE_CERT, CONSOLE_DOMAIN

cdk = pytest.importorskip("aws_cdk")
from aws_cdk import aws_cloudfront as cloudfront  # noqa: E402
from cordum_infra.context_values import ContextError  # noqa: E402
from cordum_infra.web_console import IMMUTABLE, NO_CACHE, ConsoleSettings  # noqa: E402
from cordum_infra.web_console_edge import (  # noqa: E402
    API_PATHS,
    SPA_FUNCTION_FILE,
    STREAM_PATHS,
    SecurityHeadersError,
    edge_name,
    response_headers_policy,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _cloudfront_route(path: str, patterns: list[str]) -> str | None:
    """The first of `patterns` CloudFront matches `path` with (``*`` any characters,
    ``?`` one), or None for the default behaviour."""
    for pattern in patterns:
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
        if re.fullmatch(regex, path):
            return pattern
    return None


@pytest.mark.parametrize(("name", "value"), [
    ("Strict-Transport-Security", "includeSubDomains"),
    ("Strict-Transport-Security", "max-age=10; always"),
    ("X-Frame-Options", "ALLOW-FROM https://example.com"),
    ("X-Content-Type-Options", "sniff"),
    ("Referrer-Policy", "everywhere"),
])
def test_a_header_cloudfront_cannot_send_fails_the_synth(name: str, value: str) -> None:
    stack = cdk.Stack(cdk.App())
    with pytest.raises(SecurityHeadersError, match=name):
        response_headers_policy(stack, "Headers", {name: value})


# --- the SPA function's logic ------------------------------------------------------------

SPA_CASES = {
    "/": "/index.html",
    "/runs": "/index.html",
    "/runs/4f2a9c": "/index.html",
    "/workflows/w1/runs/": "/index.html",
    "/index.html": "/index.html",
    "/assets/index-1a2b.js": "/assets/index-1a2b.js",
    "/favicon.ico": "/favicon.ico",
    "/assets/missing.css": "/assets/missing.css",
    "/.well-known": "/index.html",
    "/trailing.": "/index.html",
}


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_spa_function_rewrites_app_routes_only() -> None:
    # Given the function's file run as CloudFront runs it: handler(event) -> request
    script = (
        "const fs = require('fs'), vm = require('vm');"
        "const ctx = {}; vm.createContext(ctx);"
        "vm.runInContext(fs.readFileSync(process.argv[1], 'utf8'), ctx);"
        "const out = {};"
        "for (const uri of JSON.parse(process.argv[2])) {"
        "  const req = ctx.handler({request: {uri, method: 'GET', querystring: {a: {value: '1'}},"
        "                                    headers: {}}});"
        "  out[uri] = [req.uri, req.querystring.a.value]; }"
        "console.log(JSON.stringify(out));"
    )
    done = subprocess.run(
        ["node", "-e", script, str(SPA_FUNCTION_FILE), json.dumps(list(SPA_CASES))],
        capture_output=True, text=True, check=True, timeout=30)
    # Then a path without an extension is the app's index.html, anything else as asked,
    # the query string untouched
    result = json.loads(done.stdout)
    assert {uri: got[0] for uri, got in result.items()} == SPA_CASES
    assert {got[1] for got in result.values()} == {"1"}


# --- the same routes as the local console server -----------------------------------------


def _local_console() -> Any:
    path = REPO_ROOT / "localstack" / "web_console.py"
    if not path.is_file():
        pytest.skip("no localstack/web_console.py")
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("local_web_console", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


ROUTED = ["/", "/runs/4f2a", "/assets/index-1a2b.js", "/health", "/healthz", "/api",
          "/api/", "/api/v1/jobs", "/api/v1/jobs/j1", "/api/v1/jobs/j1/stream",
          "/api/v1/stream", "/api/v1/stream/", "/api/v1/streams", "/apidocs"]


def test_cloudfront_routes_as_the_local_console_server_does() -> None:
    local_console = _local_console()
    patterns = [*STREAM_PATHS, *API_PATHS]
    kinds = {**dict.fromkeys(STREAM_PATHS, "stream"), **dict.fromkeys(API_PATHS, "api"),
             None: "static"}
    for path in ROUTED:
        assert kinds[_cloudfront_route(path, patterns)] == local_console.route(path), path
    # And the static files carry the same Cache-Control and the same SPA rule
    assert (local_console.IMMUTABLE, local_console.NO_CACHE) == (IMMUTABLE, NO_CACHE)
    for uri, rewritten in SPA_CASES.items():
        assert (rewritten == "/index.html") == (
            uri == "/index.html" or not local_console.has_extension(uri)), uri


def test_cloudfront_names_fit_their_limits() -> None:
    # Given the longest stack name in the longest region, each name still fits its limit
    app = cdk.App()
    stack = cdk.Stack(app, "S", stack_name="s" * 48, env=cdk.Environment(
        account="123456789012", region="ap-southeast-2"))
    for suffix, limit in (("console-spa", 64), ("console", 64), ("console-headers", 128)):
        name = edge_name(stack, suffix, limit)
        assert len(name) <= limit and name.endswith(f"-ap-southeast-2-{suffix}")


def _settings(**context: str) -> ConsoleSettings:
    return ConsoleSettings.from_context(cdk.App(context=context).node)


def test_console_context_is_checked() -> None:
    assert _settings().price_class == cloudfront.PriceClass.PRICE_CLASS_100
    assert _settings(consolePriceClass="200").price_class == cloudfront.PriceClass.PRICE_CLASS_200
    assert _settings(consolePriceClass="PriceClass_All").price_class == (
        cloudfront.PriceClass.PRICE_CLASS_ALL)
    given = _settings(consoleDomain="Console.Example.com.", consoleCertificateArn=CONSOLE_CERT)
    assert (given.domain, given.certificate_arn) == (CONSOLE_DOMAIN, CONSOLE_CERT)
    for context, message in (
        ({"consolePriceClass": "50"}, "consolePriceClass"),
        ({"consoleDomain": CONSOLE_DOMAIN}, "go together"),
        ({"consoleCertificateArn": CONSOLE_CERT}, "go together"),
        ({"consoleDomain": "console", "consoleCertificateArn": CONSOLE_CERT}, "consoleDomain"),
        ({"consoleDomain": CONSOLE_DOMAIN, "consoleCertificateArn": CERT.replace(
            "us-east-1", "eu-west-1")}, "us-east-1"),
    ):
        with pytest.raises(ContextError, match=message):
            _settings(**context)
