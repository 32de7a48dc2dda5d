"""Synth tests of the web console on AWS: the dashboard's bucket behind CloudFront, which
also routes /api/* to the REST API and the stream's paths to its load balancer
(cordum_infra.web_console, cordum_infra.web_console_edge).

Shapes, each with cdk-nag: the stack's own VPC with the stream and a built dashboard
(a stand-in dist/), the same without the stream and without a build (the placeholder
page, a warning), and an existing VPC with the stream at its own name and the console at
a name of its own (consoleDomain, consoleCertificateArn). The local stack has no console.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_stream import CERT, DOMAIN, OWN_VPC, VPC_ID, _build
from tests.infra.test_synth import (
    _logical_id,
    _resources,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack: redisUrl)
)

cdk = pytest.importorskip("aws_cdk")
import costs  # noqa: E402  (infra/cdk/costs.py; test_synth puts infra/cdk on the path)
from aws_cdk import aws_cloudfront as cloudfront  # noqa: E402
from aws_cdk.assertions import Annotations, Match  # noqa: E402
from cordum_infra.stack import STACK_NAME  # noqa: E402
from cordum_infra.stream import STREAM_PATHS as LISTENER_PATHS  # noqa: E402
from cordum_infra.web_console import IMMUTABLE, NO_CACHE, NOT_BUILT_PAGE  # noqa: E402
from cordum_infra.web_console_edge import (  # noqa: E402
    API_PATHS,
    SECURITY_HEADERS_FILE,
    SPA_FUNCTION_FILE,
    STREAM_PATHS,
)

CONSOLE_DOMAIN = "console.example.com"
CONSOLE_CERT = "arn:aws:acm:us-east-1:123456789012:certificate/abcdef01-2345-4678-9abc-def012345678"
HEADERS: dict[str, str] = {k: v for k, v in json.loads(SECURITY_HEADERS_FILE.read_text()).items()
                           if not k.startswith("_")}
CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
CACHING_OPTIMIZED = "658327ea-f89d-4fab-a63d-7e88639e58f6"
ALL_VIEWER_EXCEPT_HOST = "b689b0a8-53d0-40ab-baf2-68738e2966ac"
"""AWS's managed policies (ids fixed by CloudFront, checked against CDK's below)."""
ALL_METHODS = ["GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in dashboard build: index.html, a hashed asset, a root file."""
    root = tmp_path_factory.mktemp("dist")
    (root / "assets").mkdir()
    (root / "index.html").write_text('<!doctype html><script src="/assets/index-1a2b.js">')
    (root / "assets" / "index-1a2b.js").write_text("console.log('cordum')\n")
    (root / "favicon.ico").write_bytes(b"\0")
    return root


@pytest.fixture(scope="module")
def console(inputs: dict[str, Path], dist: Path,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given the stack's own VPC, the stream (no streamDomain) and a built dashboard."""
    return _build(inputs, tmp_path_factory.mktemp("console"), nag=True,
                  streamCertificateArn=CERT, consoleDist=str(dist), **OWN_VPC)


@pytest.fixture(scope="module")
def plain(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given no stream and no dashboard build."""
    tmp = tmp_path_factory.mktemp("console-plain")
    built = _build(inputs, tmp, nag=True, consoleDist=str(tmp / "no-dist"), **OWN_VPC)
    return {**built, "out": tmp / "cdk.out"}


@pytest.fixture(scope="module")
def named(inputs: dict[str, Path], dist: Path,  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given an existing VPC, the stream at streamDomain and the console at its own name."""
    return _build(inputs, tmp_path_factory.mktemp("console-named"), nag=True, vpcId=VPC_ID,
                  streamCertificateArn=CERT, streamDomain=DOMAIN, consoleDist=str(dist),
                  consoleDomain=CONSOLE_DOMAIN, consoleCertificateArn=CONSOLE_CERT,
                  consolePriceClass="All")


# --- helpers -----------------------------------------------------------------------------


def _config(built: dict[str, Any]) -> dict[str, Any]:
    (distribution,) = _resources(built["json"], "AWS::CloudFront::Distribution").values()
    config: dict[str, Any] = distribution["Properties"]["DistributionConfig"]
    return config


def _origins(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["Id"]: o for o in config["Origins"]}


def _routes(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Path pattern -> (cache behaviour, with its origin under ``origin``), in order."""
    by_id = _origins(config)
    return {b["PathPattern"]: {**b, "origin": by_id[b["TargetOriginId"]]}
            for b in config["CacheBehaviors"]}


def _deployments(built: dict[str, Any]) -> dict[str, dict[str, Any]]:
    stack = built["stack"]
    bucket = {"Ref": _logical_id(stack, stack.console.bucket)}
    return {k: r for k, r in _resources(built["json"], "Custom::CDKBucketDeployment").items()
            if r["Properties"]["DestinationBucketName"] == bucket}


# --- the bucket --------------------------------------------------------------------------


def test_bucket_is_private_encrypted_logged_and_kept(console: dict[str, Any]) -> None:
    tpl, stack = console["json"], console["stack"]
    bucket = tpl["Resources"][_logical_id(stack, stack.console.bucket)]
    props = bucket["Properties"]
    # Then no public access, no object ACLs, SSE-S3, no versioning (a build, redeployable)
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    assert "VersioningConfiguration" not in props
    # And its access logs go to the console's log bucket; both kept on destroy
    logs_id = _logical_id(stack, stack.console.logs)
    assert props["LoggingConfiguration"] == {"DestinationBucketName": {"Ref": logs_id},
                                             "LogFilePrefix": "s3/"}
    assert bucket["DeletionPolicy"] == "Retain"
    assert tpl["Resources"][logs_id]["DeletionPolicy"] == "Retain"


def test_only_the_distribution_reads_the_bucket_through_oac(console: dict[str, Any]) -> None:
    tpl, stack = console["json"], console["stack"]
    bucket_id = _logical_id(stack, stack.console.bucket)
    distribution_id = _logical_id(stack, stack.console.distribution)
    (policy,) = [r["Properties"] for r in _resources(tpl, "AWS::S3::BucketPolicy").values()
                 if r["Properties"]["Bucket"] == {"Ref": bucket_id}]
    statements = policy["PolicyDocument"]["Statement"]
    # Then plaintext is refused and the one grant is CloudFront's, for this distribution
    assert any(s["Effect"] == "Deny" and s["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}} for s in statements)
    (grant,) = [s for s in statements if s["Effect"] == "Allow"]
    assert grant["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert grant["Action"] == "s3:GetObject"
    source = json.dumps(grant["Condition"]["StringEquals"]["AWS:SourceArn"])
    assert f'{{"Ref": "{distribution_id}"}}' in source and ":distribution/" in source
    # And the bucket origin signs its requests with an origin access control (no OAI)
    (oac,) = _resources(tpl, "AWS::CloudFront::OriginAccessControl").values()
    config = oac["Properties"]["OriginAccessControlConfig"]
    assert (config["OriginAccessControlOriginType"], config["SigningBehavior"],
            config["SigningProtocol"]) == ("s3", "always", "sigv4")
    (s3_origin,) = [o for o in _config(console)["Origins"] if "S3OriginConfig" in o]
    assert s3_origin["DomainName"] == {"Fn::GetAtt": [bucket_id, "RegionalDomainName"]}
    assert s3_origin["S3OriginConfig"] == {"OriginAccessIdentity": ""}
    assert "OriginAccessControlId" in s3_origin


def test_cloudfront_logs_to_a_bucket_kept_90_days(console: dict[str, Any]) -> None:
    tpl, stack = console["json"], console["stack"]
    logs_id = _logical_id(stack, stack.console.logs)
    props = tpl["Resources"][logs_id]["Properties"]
    # Then the distribution logs to the log bucket, which keeps ACLs on for that
    assert _config(console)["Logging"] == {
        "Bucket": {"Fn::GetAtt": [logs_id, "RegionalDomainName"]}, "Prefix": "cloudfront/"}
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]}
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 90
    # And S3 writes the bucket's access logs under its policy (no legacy canned ACL)
    assert "AccessControl" not in props
    (policy,) = [r["Properties"] for r in _resources(tpl, "AWS::S3::BucketPolicy").values()
                 if r["Properties"]["Bucket"] == {"Ref": logs_id}]
    (writer,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert writer["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert writer["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::GetAtt": [_logical_id(stack, stack.console.bucket), "Arn"]}


def test_assets_are_cached_a_year_and_index_html_revalidated(console: dict[str, Any]) -> None:
    deployments = _deployments(console)
    by_filter = {tuple(d["Properties"].get("Include", [])): (k, d["Properties"])
                 for k, d in deployments.items()}
    assert len(deployments) == 2
    assets_id, assets = by_filter[("assets/*",)]
    files_id, files = by_filter[()]
    # Then the hashed files are immutable for a year and never pruned
    assert assets["Exclude"] == ["*"]
    assert assets["SystemMetadata"] == {"cache-control": IMMUTABLE}
    assert IMMUTABLE == "public, max-age=31536000, immutable"
    assert assets["Prune"] is False
    # And everything else (index.html) is revalidated on each load, pruned, and copied
    # only once the assets it names are there
    assert files["Exclude"] == ["assets/*"]
    assert files["SystemMetadata"] == {"cache-control": NO_CACHE} == {"cache-control": "no-cache"}
    assert files["Prune"] is True
    assert assets_id in console["json"]["Resources"][files_id]["DependsOn"]
    # And both copy the same build
    assert assets["SourceObjectKeys"] == files["SourceObjectKeys"]


def test_without_a_build_a_placeholder_page_and_a_warning(plain: dict[str, Any]) -> None:
    stack = plain["stack"]
    (deployment,) = _deployments(plain).values()
    assert deployment["Properties"]["SystemMetadata"] == {"cache-control": "no-cache"}
    # Then the page deployed says the dashboard was not built
    (key,) = deployment["Properties"]["SourceObjectKeys"]
    (asset,) = [a for a in plain["assets"]["files"].values()
                if a["destinations"] and key in json.dumps(a["destinations"])]
    page = (plain["out"] / asset["source"]["path"] / "index.html").read_text()
    assert page == NOT_BUILT_PAGE and "not built" in page
    # And the synth says so
    Annotations.from_stack(stack).has_warning(
        "*", Match.string_like_regexp("The dashboard is not built.*make dashboard"))


# --- the distribution --------------------------------------------------------------------


def test_stream_paths_then_api_paths_each_to_their_origin(console: dict[str, Any]) -> None:
    stack = console["stack"]
    routes = _routes(_config(console))
    # Then the stream's paths come first (more specific), then the API's
    assert list(routes) == [*STREAM_PATHS, *API_PATHS]
    assert STREAM_PATHS == ("/api/v1/stream", "/api/v1/jobs/*/stream")
    assert set(STREAM_PATHS) <= set(LISTENER_PATHS)
    # The stream: its load balancer over HTTPS (TLS 1.2), a long read timeout, GET only
    lb_id = _logical_id(stack, stack.stream.load_balancer)
    for path in STREAM_PATHS:
        origin = routes[path]["origin"]
        assert origin["DomainName"] == {"Fn::GetAtt": [lb_id, "DNSName"]}
        assert origin["CustomOriginConfig"] == {
            "OriginProtocolPolicy": "https-only", "OriginReadTimeout": 60,
            "OriginSSLProtocols": ["TLSv1.2"]}
        assert "OriginPath" not in origin
        assert routes[path]["AllowedMethods"] == ["GET", "HEAD"]
    # The API: its regional endpoint with the stage as the origin path, every method
    api_id = _logical_id(stack, stack.api.rest_api)
    for path in API_PATHS:
        origin = routes[path]["origin"]
        assert origin["DomainName"] == {"Fn::Join": ["", [
            {"Ref": api_id}, ".execute-api.us-east-1.", {"Ref": "AWS::URLSuffix"}]]}
        assert origin["OriginPath"] == "/prod" == f"/{stack.api.stage_name}"
        assert origin["CustomOriginConfig"]["OriginProtocolPolicy"] == "https-only"
        assert origin["CustomOriginConfig"]["OriginSSLProtocols"] == ["TLSv1.2"]
        assert routes[path]["AllowedMethods"] == ALL_METHODS
    # And both pass every viewer header but Host (keys, tenant, query, body) uncached
    assert stack.resolve(cloudfront.CachePolicy.CACHING_DISABLED.cache_policy_id) == (
        CACHING_DISABLED)
    assert stack.resolve(cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER
                         .origin_request_policy_id) == ALL_VIEWER_EXCEPT_HOST
    for path, route in routes.items():
        assert route["CachePolicyId"] == CACHING_DISABLED, path
        assert route["OriginRequestPolicyId"] == ALL_VIEWER_EXCEPT_HOST, path
        assert route["Compress"] is False, path


def test_the_stream_at_its_load_balancer_name_warns(console: dict[str, Any],
                                                    named: dict[str, Any]) -> None:
    Annotations.from_stack(console["stack"]).has_warning(
        f"/{STACK_NAME}", Match.string_like_regexp("No streamDomain.*502"))
    assert not Annotations.from_stack(named["stack"]).find_warning(
        "*", Match.string_like_regexp("No streamDomain.*"))


def test_without_the_stream_no_stream_route(plain: dict[str, Any]) -> None:
    config = _config(plain)
    assert list(_routes(config)) == list(API_PATHS)
    assert len(config["Origins"]) == 2


def test_default_behaviour_serves_the_bucket_with_the_spa_fallback(
    console: dict[str, Any],
) -> None:
    stack, config = console["stack"], _config(console)
    default = config["DefaultCacheBehavior"]
    origin = _origins(config)[default["TargetOriginId"]]
    assert origin["DomainName"] == {
        "Fn::GetAtt": [_logical_id(stack, stack.console.bucket), "RegionalDomainName"]}
    assert default["AllowedMethods"] == ["GET", "HEAD"]
    assert default["CachePolicyId"] == CACHING_OPTIMIZED
    assert config["DefaultRootObject"] == "index.html"
    # Then the SPA function runs on the default behaviour, at viewer request, and nowhere
    # else; no custom error response would turn the API's 403/404 into index.html
    spa_id = _logical_id(stack, stack.console.spa)
    assert default["FunctionAssociations"] == [
        {"EventType": "viewer-request", "FunctionARN": {"Fn::GetAtt": [spa_id, "FunctionARN"]}}]
    assert all("FunctionAssociations" not in b for b in config["CacheBehaviors"])
    assert "CustomErrorResponses" not in config
    function = console["json"]["Resources"][spa_id]["Properties"]
    assert function["FunctionConfig"]["Runtime"] == "cloudfront-js-2.0"
    assert function["FunctionCode"] == SPA_FUNCTION_FILE.read_text()


def test_https_only_http2_and_3_price_class_100_no_geo_restriction(
    console: dict[str, Any],
) -> None:
    config = _config(console)
    behaviours = [config["DefaultCacheBehavior"], *config["CacheBehaviors"]]
    assert {b["ViewerProtocolPolicy"] for b in behaviours} == {"redirect-to-https"}
    assert (config["HttpVersion"], config["IPV6Enabled"]) == ("http2and3", True)
    assert config["PriceClass"] == "PriceClass_100"
    assert "Restrictions" not in config and "WebACLId" not in config
    # At the default name CloudFront's own certificate (its TLS policy, acknowledged)
    assert "ViewerCertificate" not in config and "Aliases" not in config


def test_at_a_name_of_its_own_tls_1_2_minimum(named: dict[str, Any]) -> None:
    config = _config(named)
    assert config["Aliases"] == [CONSOLE_DOMAIN]
    assert config["ViewerCertificate"] == {
        "AcmCertificateArn": CONSOLE_CERT, "MinimumProtocolVersion": "TLSv1.2_2021",
        "SslSupportMethod": "sni-only"}
    assert config["PriceClass"] == "PriceClass_All"
    # And the stream's route goes to the name its certificate covers
    for path in STREAM_PATHS:
        assert _routes(config)[path]["origin"]["DomainName"] == DOMAIN
    assert named["json"]["Outputs"]["ConsoleUrl"]["Value"] == f"https://{CONSOLE_DOMAIN}"


@pytest.mark.parametrize("shape", ["console", "plain", "named"])
def test_cfn_lint_passes_on_every_console_shape(shape: str,
                                               request: pytest.FixtureRequest) -> None:
    from tests.infra.test_functions_obs import _cfn_lint

    # Given each shape, built with the AwsSolutions pack (a finding fails its synth)
    assert _cfn_lint(request.getfixturevalue(shape)["json"]) == []


def test_every_behaviour_answers_with_the_files_security_headers(
    console: dict[str, Any],
) -> None:
    stack, config = console["stack"], _config(console)
    policy_id = _logical_id(stack, stack.console.headers)
    behaviours = [config["DefaultCacheBehavior"], *config["CacheBehaviors"]]
    assert {json.dumps(b["ResponseHeadersPolicyId"]) for b in behaviours} == {
        json.dumps({"Ref": policy_id})}
    policy = console["json"]["Resources"][policy_id]["Properties"]["ResponseHeadersPolicyConfig"]
    security = policy["SecurityHeadersConfig"]
    # Then exactly the file's CSP, and its other security headers, each overriding
    assert security["ContentSecurityPolicy"] == {
        "ContentSecurityPolicy": HEADERS["Content-Security-Policy"], "Override": True}
    assert security["StrictTransportSecurity"] == {
        "AccessControlMaxAgeSec": 63072000, "IncludeSubdomains": True, "Preload": False,
        "Override": True}
    assert HEADERS["Strict-Transport-Security"] == "max-age=63072000; includeSubDomains"
    assert security["ContentTypeOptions"] == {"Override": True}
    assert security["FrameOptions"] == {"FrameOption": HEADERS["X-Frame-Options"],
                                        "Override": True}
    assert security["ReferrerPolicy"] == {"ReferrerPolicy": HEADERS["Referrer-Policy"],
                                          "Override": True}
    # And the rest as custom headers: every header of the file is sent, none twice
    custom = {h["Header"]: h["Value"] for h in policy["CustomHeadersConfig"]["Items"]}
    typed = {"Content-Security-Policy", "Strict-Transport-Security", "X-Content-Type-Options",
             "X-Frame-Options", "Referrer-Policy"}
    assert custom == {k: v for k, v in HEADERS.items() if k not in typed}
    assert set(HEADERS) == set(custom) | typed


# --- outputs, shapes, context --------------------------------------------------------------


def test_outputs_name_the_console_and_its_bucket(console: dict[str, Any]) -> None:
    stack, outputs = console["stack"], console["json"]["Outputs"]
    distribution_id = _logical_id(stack, stack.console.distribution)
    assert outputs["ConsoleUrl"]["Value"] == {"Fn::Join": ["", [
        "https://", {"Fn::GetAtt": [distribution_id, "DomainName"]}]]}
    assert outputs["ConsoleBucketName"]["Value"] == {
        "Ref": _logical_id(stack, stack.console.bucket)}
    assert outputs["ConsoleDistributionId"]["Value"] == {"Ref": distribution_id}
    # And the account-global CloudFront names carry the stack's name and region
    names = [json.dumps(r["Properties"]) for r in console["json"]["Resources"].values()
             if r["Type"] in ("AWS::CloudFront::Function", "AWS::CloudFront::OriginAccessControl",
                              "AWS::CloudFront::ResponseHeadersPolicy")]
    assert len(names) == 3 and all(f"{STACK_NAME}-us-east-1-console" in n for n in names)


def test_the_cost_table_prices_the_console(console: dict[str, Any]) -> None:
    inventory = costs.inventory(console["json"])
    assert inventory.distributions == 1
    # Then its row: within CloudFront's free tier, cents of S3, the same at every volume
    cloudfront_usd, s3_usd = costs.console_usd(inventory)
    assert cloudfront_usd == 0 and 0 < s3_usd < 1
    for jobs in costs.VOLUMES.values():
        rows = costs.monthly(inventory, jobs=jobs)
        (row,) = [r for r in rows if r.item.startswith("Web console")]
        assert row.monthly == pytest.approx(s3_usd)


def test_the_local_stack_has_no_console(local: dict[str, Any]) -> None:  # noqa: F811
    tpl = local["json"]
    assert local["stack"].console is None
    for kind in ("AWS::CloudFront::Distribution", "AWS::CloudFront::Function",
                 "AWS::S3::Bucket", "Custom::CDKBucketDeployment"):
        assert not _resources(tpl, kind), kind
    assert not [k for k in tpl["Outputs"] if k.startswith("Console")]
    assert costs.console_usd(costs.inventory(tpl)) == (0.0, 0.0)
