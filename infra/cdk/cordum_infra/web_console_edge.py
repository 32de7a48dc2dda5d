"""What the console's CloudFront distribution does at the edge (cordum_infra.web_console):
where each path goes, the headers every answer carries, and the single-page app fallback.

Routes, in the order CloudFront tries them (the first pattern that matches wins, so the
stream's paths come before ``/api/*``):

======================== ============================ ===============================
path                     origin                       how
======================== ============================ ===============================
STREAM_PATHS             the stream's load balancer   only with the stream; GET/HEAD,
                         (HTTPS, STREAM_READ_TIMEOUT)  nothing cached, every viewer
                                                      header but Host
API_PATHS                the REST API's stage         every method, nothing cached,
                         (``/<stage>`` origin path)   every viewer header but Host,
                                                      query strings, cookies, bodies
everything else          the dashboard's bucket (OAC) cached as the files say
                                                      (Cache-Control), SPA fallback
======================== ============================ ===============================

Host is the one header not passed on: API Gateway and the load balancer's certificate
answer to their own names, which CloudFront then sends (and checks the origin's
certificate against). ``X-API-Key``, ``Authorization``, ``X-Tenant-ID`` and the
WebSocket handshake's headers (``Sec-WebSocket-*``, how a browser hands the stream its
key) all pass. CloudFront carries WebSocket upgrades on any behaviour by itself.

The SPA fallback is a CloudFront Function (``web_console_spa.js``) on the default
behaviour alone, not the distribution's custom error responses: those apply to every
behaviour, and would turn the API's own 403 and 404 answers into index.html.

Every behaviour answers with the headers of ``dashboard/security-headers.json`` (keys
starting with ``_`` are notes), the file the local console server reads too
(localstack/web_console.py), so the two never differ. CloudFront refuses the security
headers it has typed fields for as custom headers, so those go through its fields and
the rest as custom headers; a value a typed field cannot hold fails the synth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins

from cordum_infra.context_values import ContextError
from cordum_infra.settings import REPO_ROOT

if TYPE_CHECKING:
    from constructs import Construct

SECURITY_HEADERS_FILE = REPO_ROOT / "dashboard" / "security-headers.json"
SPA_FUNCTION_FILE = Path(__file__).with_name("web_console_spa.js")

STREAM_PATHS = ("/api/v1/stream", "/api/v1/jobs/*/stream")
"""A tenant's stream and one job's (CloudFront's ``*`` matches any characters); the
stream's listener forwards both (cordum_infra.stream.STREAM_PATHS)."""
API_PATHS = ("/api/*", "/health")
"""The REST API's paths, as the local console server routes them."""

API_READ_TIMEOUT = Duration.seconds(30)
"""CloudFront's default: above API Gateway's 29 s integration limit, so the API answers
its own 504 first."""
STREAM_READ_TIMEOUT = Duration.seconds(60)
"""How long CloudFront waits for the next bytes of an answer: the most it allows without
a quota increase. The stream writes a keepalive every 30 s, so an open SSE answer or
WebSocket is never idle that long."""
ORIGIN_TLS = [cloudfront.OriginSslPolicy.TLS_V1_2]
"""CloudFront to the API and the load balancer: HTTPS with TLS 1.2 (or later) only."""

REGION_MAX_LENGTH = 14
"""The longest region name (ap-southeast-2, cn-northwest-1): what global names leave room for."""


class SecurityHeadersError(ContextError):
    """dashboard/security-headers.json holds a header CloudFront cannot send as written."""


def edge_name(scope: Construct, suffix: str, max_length: int) -> str:
    """A name for a CloudFront resource (function, policy, origin access control): those
    are global to the account, so the name carries the stack's name and region (two
    stacks, or one stack in two regions, never collide)."""
    stack = Stack.of(scope)
    room = max_length - REGION_MAX_LENGTH - len(suffix) - 2
    return f"{stack.stack_name[:room]}-{stack.region}-{suffix}"


def security_headers(path: Path = SECURITY_HEADERS_FILE) -> dict[str, str]:
    """Header name -> value, less the file's ``_`` notes."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in doc.items() if not name.startswith("_")}


def _hsts(value: str) -> cloudfront.ResponseHeadersStrictTransportSecurity:
    directives = [d.strip() for d in value.split(";") if d.strip()]
    ages = [d[len("max-age="):] for d in directives if d.lower().startswith("max-age=")]
    flags = {d.lower() for d in directives if not d.lower().startswith("max-age=")}
    if len(ages) != 1 or not ages[0].isdigit() or not flags <= {"includesubdomains", "preload"}:
        raise SecurityHeadersError(
            f"{SECURITY_HEADERS_FILE}: Strict-Transport-Security must be max-age=<seconds> "
            f"with includeSubDomains and preload at most: {value}")
    return cloudfront.ResponseHeadersStrictTransportSecurity(
        access_control_max_age=Duration.seconds(int(ages[0])),
        include_subdomains="includesubdomains" in flags, preload="preload" in flags,
        override=True)


def _typed(name: str, value: str) -> dict[str, object] | None:
    """The security-headers field that sends header `name`, or None for a custom header."""
    lowered, word = name.lower(), value.strip().upper().replace("-", "_")
    if lowered == "content-security-policy":
        return {"content_security_policy": cloudfront.ResponseHeadersContentSecurityPolicy(
            content_security_policy=value, override=True)}
    if lowered == "strict-transport-security":
        return {"strict_transport_security": _hsts(value)}
    if lowered == "x-content-type-options" and word == "NOSNIFF":
        return {"content_type_options": cloudfront.ResponseHeadersContentTypeOptions(
            override=True)}
    if lowered == "x-frame-options" and word in ("DENY", "SAMEORIGIN"):
        return {"frame_options": cloudfront.ResponseHeadersFrameOptions(
            frame_option=cloudfront.HeadersFrameOption[word], override=True)}
    if lowered == "referrer-policy" and word in cloudfront.HeadersReferrerPolicy.__members__:
        return {"referrer_policy": cloudfront.ResponseHeadersReferrerPolicy(
            referrer_policy=cloudfront.HeadersReferrerPolicy[word], override=True)}
    if lowered in ("x-content-type-options", "x-frame-options", "referrer-policy",
                   "x-xss-protection"):
        raise SecurityHeadersError(
            f"{SECURITY_HEADERS_FILE}: CloudFront sends {name} through its security headers "
            f"only, which cannot hold: {value}")
    return None


def response_headers_policy(scope: Construct, construct_id: str,
                            headers: dict[str, str]) -> cloudfront.ResponseHeadersPolicy:
    """The headers every answer of the console carries (override: an origin's own
    value of the same header is replaced)."""
    typed: dict[str, object] = {}
    custom: list[cloudfront.ResponseCustomHeader] = []
    for name, value in headers.items():
        field = _typed(name, value)
        if field is not None:
            typed.update(field)
        else:
            custom.append(cloudfront.ResponseCustomHeader(header=name, value=value,
                                                          override=True))
    return cloudfront.ResponseHeadersPolicy(
        scope,
        construct_id,
        response_headers_policy_name=edge_name(scope, "console-headers", 128),
        comment="Cordum console: dashboard/security-headers.json",
        security_headers_behavior=cloudfront.ResponseSecurityHeadersBehavior(**typed),  # type: ignore[arg-type]
        custom_headers_behavior=(
            cloudfront.ResponseCustomHeadersBehavior(custom_headers=custom) if custom else None),
    )


def spa_fallback(scope: Construct, construct_id: str) -> cloudfront.Function:
    """The viewer-request function of the default behaviour (web_console_spa.js)."""
    return cloudfront.Function(
        scope,
        construct_id,
        code=cloudfront.FunctionCode.from_file(file_path=str(SPA_FUNCTION_FILE)),
        runtime=cloudfront.FunctionRuntime.JS_2_0,
        function_name=edge_name(scope, "console-spa", 64),
        comment="Cordum console: an app route (no file extension) -> /index.html",
    )


def api_origin(scope: Construct, rest_api_id: str, stage_name: str) -> origins.HttpOrigin:
    """The REST API's regional endpoint, its stage as the origin path: ``/api/v1/jobs``
    at the edge is ``/<stage>/api/v1/jobs`` at API Gateway."""
    stack = Stack.of(scope)
    return origins.HttpOrigin(
        f"{rest_api_id}.execute-api.{stack.region}.{stack.url_suffix}",
        origin_path=f"/{stage_name}",
        protocol_policy=cloudfront.OriginProtocolPolicy.HTTPS_ONLY,
        origin_ssl_protocols=ORIGIN_TLS,
        read_timeout=API_READ_TIMEOUT,
    )


def stream_origin(domain: str) -> origins.HttpOrigin:
    """The stream's load balancer at `domain`, a name its certificate covers: CloudFront
    checks the origin's certificate against the name it connects to."""
    return origins.HttpOrigin(
        domain,
        protocol_policy=cloudfront.OriginProtocolPolicy.HTTPS_ONLY,
        origin_ssl_protocols=ORIGIN_TLS,
        read_timeout=STREAM_READ_TIMEOUT,
    )


def behaviours(
    *,
    static: cloudfront.IOrigin,
    api: cloudfront.IOrigin,
    stream: cloudfront.IOrigin | None,
    headers: cloudfront.IResponseHeadersPolicy,
    spa: cloudfront.IFunction,
) -> tuple[cloudfront.BehaviorOptions, dict[str, cloudfront.BehaviorOptions]]:
    """(default behaviour, path pattern -> behaviour in CloudFront's order)."""
    https = cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS

    def passthrough(origin: cloudfront.IOrigin,
                    methods: cloudfront.AllowedMethods) -> cloudfront.BehaviorOptions:
        return cloudfront.BehaviorOptions(
            origin=origin,
            viewer_protocol_policy=https,
            allowed_methods=methods,
            cache_policy=cloudfront.CachePolicy.CACHING_DISABLED,
            origin_request_policy=cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER,
            response_headers_policy=headers,
            # Answers pass as the origin sent them (an SSE answer is never held back).
            compress=False,
        )

    additional: dict[str, cloudfront.BehaviorOptions] = {}
    if stream is not None:
        for path in STREAM_PATHS:
            additional[path] = passthrough(stream, cloudfront.AllowedMethods.ALLOW_GET_HEAD)
    for path in API_PATHS:
        additional[path] = passthrough(api, cloudfront.AllowedMethods.ALLOW_ALL)
    default = cloudfront.BehaviorOptions(
        origin=static,
        viewer_protocol_policy=https,
        allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
        # Honours each file's Cache-Control (index.html no-cache, assets a year).
        cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
        response_headers_policy=headers,
        compress=True,
        function_associations=[cloudfront.FunctionAssociation(
            function=spa, event_type=cloudfront.FunctionEventType.VIEWER_REQUEST)],
    )
    return default, additional
