#!/usr/bin/env python3
"""Monthly cost of the AWS stack, from its synthesized template: idle, 1M and 100M jobs.

    python infra/cdk/costs.py                      # egress=endpoints and egress=nat
    python infra/cdk/costs.py -c natsCluster=true  # any context, as for cdk deploy

The sample shape runs the live event stream (a sample streamCertificateArn in the
sample account and region): its tasks and its Application Load Balancer are
priced; a stack deployed without a certificate has neither.

Synthesizes the AWS shape offline (no credentials, no Docker, cdk-nag off),
counts what is billed by the hour or the month in the template (cache nodes,
Fargate vCPU and GB, load balancers, endpoints, NAT gateways, secrets, keys,
alarms, dashboards, scheduled functions, the console) and prices it with PRICES. What a job
costs comes from the measured figures of BENCHMARKS.md (PER_JOB). Every price
is an us-east-1 on-demand list price, 730 hours a month, no free tier unless
said: check them against the AWS pricing pages before relying on a total.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cost_prices import (  # noqa: E402  (infra/cdk, beside this script)
    ALB_LCUS,
    ALB_PUBLIC_IPS,
    BRIDGE_METRICS,
    BYTES_PER_JOB,
    CACHE_NODES,
    CACHE_USABLE,
    CLOUDFRONT_FREE,
    CONSOLE_USAGE,
    CONTAINER_INSIGHTS_METRICS,
    DEFAULT_TICK_SECONDS,
    EMF_SERIES_WITH_JOBS,
    ESM_POLL_REQUESTS_PER_MINUTE,
    GB,
    HOURS,
    IDLE_LOG_GB,
    MINUTES,
    PER_JOB,
    PRICES,
    STREAM_METRICS,
    TICK_SECONDS,
    TRACED_FUNCTIONS,
    VALKEY_DISCOUNT,
)


@dataclass
class Inventory:
    """What the template holds that is billed whether or not jobs flow."""

    alarms: int = 0
    alarm_metrics: int = 0
    dashboards: int = 0
    secrets: int = 0
    kms_keys: int = 0
    load_balancers: int = 0
    application_load_balancers: int = 0
    """Of ``load_balancers``: the stream's (the rest are network load balancers)."""
    stream: bool = False
    """The template runs the live event stream (its container ``stream``)."""
    nat_gateways: int = 0
    public_ips: int = 0
    interface_endpoint_zones: int = 0
    cache_nodes: dict[str, int] = field(default_factory=dict)
    cache_engine: str = "redis"
    fargate_vcpu: float = 0.0
    fargate_gb: float = 0.0
    ecs_services: int = 0
    insight_clusters: int = 0
    functions: int = 0
    arm64: bool = False
    tick_functions: int = 0
    tick_gb_s: float = 0.0
    """GB-seconds of all tick invocations of a month."""
    event_sources: int = 0
    file_systems: int = 0
    namespaces: int = 0
    distributions: int = 0
    """CloudFront distributions: the web console's."""
    job_retention_s: int = 3 * 24 * 3600


@dataclass(frozen=True)
class Row:
    item: str
    basis: str
    monthly: float


def service_tasks(service_id: str, service: dict[str, Any], scalable_targets: Any) -> int:
    """Tasks an ECS service keeps running at idle: its scaling's floor (MinCapacity)
    when it scales (the template then gives it no DesiredCount), else its
    DesiredCount (CloudFormation's default is 1)."""
    for target in scalable_targets:
        if (target.get("ScalableDimension") == "ecs:service:DesiredCount"
                and f'"{service_id}"' in json.dumps(target["ResourceId"])):
            return int(target["MinCapacity"])
    return int(service.get("DesiredCount", 1))


def inventory(template: Mapping[str, Any]) -> Inventory:
    """Count the priced resources of a synthesized template."""
    resources: dict[str, dict[str, Any]] = template["Resources"]

    def of(kind: str) -> dict[str, dict[str, Any]]:
        return {k: r.get("Properties", {}) for k, r in resources.items() if r["Type"] == kind}

    inv = Inventory()
    for alarm in of("AWS::CloudWatch::Alarm").values():
        inv.alarms += 1
        queries = alarm.get("Metrics")
        inv.alarm_metrics += (
            sum(1 for q in queries if "MetricStat" in q or "SELECT" in str(q.get("Expression")))
            if queries else 1
        )
    inv.dashboards = len(of("AWS::CloudWatch::Dashboard"))
    inv.secrets = len(of("AWS::SecretsManager::Secret"))
    inv.kms_keys = len(of("AWS::KMS::Key"))
    balancers = of("AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    inv.load_balancers = len(balancers)
    inv.application_load_balancers = sum(
        1 for b in balancers if b.get("Type", "application") == "application"
    )
    inv.nat_gateways = len(of("AWS::EC2::NatGateway"))
    inv.public_ips = len(of("AWS::EC2::EIP"))
    inv.interface_endpoint_zones = sum(
        len(p["SubnetIds"]) for p in of("AWS::EC2::VPCEndpoint").values()
        if p.get("VpcEndpointType") == "Interface"
    )
    for group in of("AWS::ElastiCache::ReplicationGroup").values():
        node = group["CacheNodeType"]
        inv.cache_nodes[node] = inv.cache_nodes.get(node, 0) + int(group["NumCacheClusters"])
        inv.cache_engine = str(group.get("Engine", "redis"))
    tasks = of("AWS::ECS::TaskDefinition")
    scaled = of("AWS::ApplicationAutoScaling::ScalableTarget").values()
    for service_id, service in of("AWS::ECS::Service").items():
        task = tasks[service["TaskDefinition"]["Ref"]]
        count = service_tasks(service_id, service, scaled)
        inv.fargate_vcpu += count * int(task["Cpu"]) / 1024
        inv.fargate_gb += count * int(task["Memory"]) / 1024
        inv.arm64 = inv.arm64 or "ARM64" in str(task.get("RuntimePlatform", ""))
        inv.ecs_services += 1
        inv.stream = inv.stream or any(
            c.get("Name") == "stream" for c in task.get("ContainerDefinitions", [])
        )
    inv.insight_clusters = sum(
        1 for c in of("AWS::ECS::Cluster").values()
        if any(s.get("Value") == "enabled" for s in c.get("ClusterSettings", []))
    )
    # Cordum's functions (zip, Python); not the deploy-time custom resource handlers
    # (CDK's copy of the kernel's policy into its bucket is Python too: index.handler).
    functions = {k: p for k, p in of("AWS::Lambda::Function").items()
                 if str(p.get("Runtime", "")).startswith("python")
                 and p.get("Handler") != "index.handler"}
    inv.functions = len(functions)
    inv.arm64 = inv.arm64 or any("arm64" in p.get("Architectures", []) for p in functions.values())
    for fn in functions.values():
        retention = fn.get("Environment", {}).get("Variables", {}).get("CORDUM_JOB_RETENTION_S")
        if isinstance(retention, str) and retention.isdigit():
            inv.job_retention_s = int(retention)
    for rule in of("AWS::Events::Rule").values():
        if "ScheduleExpression" not in rule:
            continue
        for target in rule.get("Targets", []):
            arn = target.get("Arn", {})
            fn_id = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
            if fn_id in functions:
                props = functions[fn_id]
                module = str(props["Handler"]).removesuffix(".handler")
                seconds = TICK_SECONDS.get(module, DEFAULT_TICK_SECONDS)
                inv.tick_functions += 1
                inv.tick_gb_s += MINUTES * seconds * int(props.get("MemorySize", 128)) / 1024
    inv.event_sources = len(of("AWS::Lambda::EventSourceMapping"))
    inv.file_systems = len(of("AWS::EFS::FileSystem"))
    inv.namespaces = len(of("AWS::ServiceDiscovery::PrivateDnsNamespace"))
    inv.distributions = len(of("AWS::CloudFront::Distribution"))
    return inv


def console_usd(inv: Inventory) -> tuple[float, float]:
    """(CloudFront, S3) USD a month of the console at CONSOLE_USAGE: CloudFront beyond
    its always-free tier, the bucket's storage, reads and log deliveries."""
    if not inv.distributions:
        return 0.0, 0.0
    p, use, free = PRICES, CONSOLE_USAGE, CLOUDFRONT_FREE
    cloudfront = (max(0.0, use["gb"] - free["gb"]) * p["cloudfront_gb"]
                  + max(0, use["requests"] - free["requests"]) * p["cloudfront_request"]
                  + max(0, use["page_loads"] - free["functions"]) * p["cloudfront_function"])
    s3 = (use["stored_gb"] * p["s3_gb_month"] + use["origin_gets"] * p["s3_get"]
          + use["log_puts"] * p["s3_put"])
    return cloudfront, s3


def cache_for(inv: Inventory, jobs: int) -> tuple[str, int, float]:
    """(node type, nodes, USD a month) of the cache: the template's, or the smallest
    node type that holds the jobs kept (retention x rate x BYTES_PER_JOB)."""
    node, count = next(iter(inv.cache_nodes.items()))
    stored = jobs / (HOURS * 3600) * inv.job_retention_s * BYTES_PER_JOB / GB
    need = stored / CACHE_USABLE
    if node not in CACHE_NODES or CACHE_NODES[node][0] < need:
        fits = [n for n, (mem, _) in CACHE_NODES.items() if mem >= need]
        node = fits[0] if fits else list(CACHE_NODES)[-1]
    price = CACHE_NODES[node][1] * (VALKEY_DISCOUNT if inv.cache_engine == "valkey" else 1)
    return node, count, count * price * HOURS


def monthly(inv: Inventory, *, jobs: int) -> list[Row]:
    """One row per priced item, at `jobs` jobs a month."""
    p = PRICES
    arm = "_arm" if inv.arm64 else ""
    rows: list[Row] = []

    def add(item: str, basis: str, usd: float) -> None:
        if usd > 0:
            rows.append(Row(item, basis, usd))

    node, count, cache_usd = cache_for(inv, jobs)
    add("ElastiCache", f"{count} x {node} ({inv.cache_engine}), per node-hour", cache_usd)
    add("Fargate", f"{inv.ecs_services} services, {inv.fargate_vcpu:g} vCPU and "
        f"{inv.fargate_gb:g} GB running, per vCPU-hour and GB-hour",
        HOURS * (inv.fargate_vcpu * p[f"fargate_vcpu_hour{arm}"]
                 + inv.fargate_gb * p[f"fargate_gb_hour{arm}"]))
    network_lbs = inv.load_balancers - inv.application_load_balancers
    add("Network Load Balancer", f"{network_lbs}, per hour", network_lbs
        * p["nlb_hour"] * HOURS)
    add("Application Load Balancer",
        f"{inv.application_load_balancers} (the stream's), per hour, about {ALB_LCUS:g} "
        f"LCU and {ALB_PUBLIC_IPS} public IPv4 each",
        inv.application_load_balancers * HOURS
        * (p["alb_hour"] + ALB_LCUS * p["alb_lcu_hour"]
           + ALB_PUBLIC_IPS * p["public_ipv4_hour"]))
    add("VPC interface endpoints",
        f"{inv.interface_endpoint_zones} endpoint-zones, per endpoint-zone-hour",
        inv.interface_endpoint_zones * p["interface_endpoint_zone_hour"] * HOURS)
    add("NAT gateway", f"{inv.nat_gateways}, and {inv.public_ips} public IPv4, per hour",
        HOURS * (inv.nat_gateways * p["nat_hour"] + inv.public_ips * p["public_ipv4_hour"]))
    add("Lambda, ticks", f"{inv.tick_functions} functions once a minute, per GB-s and request",
        inv.tick_gb_s * p[f"lambda_gb_s{arm}"] + inv.tick_functions * MINUTES
        * p["lambda_request"])
    add("Secrets Manager", f"{inv.secrets} secrets, per secret-month",
        inv.secrets * p["secret_month"])
    add("KMS", f"{inv.kms_keys} keys, per key-month", inv.kms_keys * p["kms_key_month"])
    add("CloudWatch alarms", f"{inv.alarms} alarms reading {inv.alarm_metrics} metrics, "
        "per alarm metric", inv.alarm_metrics * p["alarm_metric"])
    add("CloudWatch dashboards", f"{inv.dashboards}, per dashboard",
        inv.dashboards * p["dashboard_month"])
    insight_metrics = (inv.insight_clusters * CONTAINER_INSIGHTS_METRICS["cluster"]
                       + (inv.ecs_services if inv.insight_clusters else 0)
                       * CONTAINER_INSIGHTS_METRICS["service"])
    emf = (BRIDGE_METRICS + (STREAM_METRICS if inv.stream else 0)
           + (EMF_SERIES_WITH_JOBS if jobs else 0))
    add("CloudWatch metrics", f"Container Insights ~{insight_metrics}, Cordum's {emf}, "
        "per metric-month", (insight_metrics + emf) * p["custom_metric_month"])
    polls = inv.event_sources * ESM_POLL_REQUESTS_PER_MINUTE * MINUTES
    add("SQS, polls", f"long polls of {inv.event_sources} event sources, per request",
        polls * p["sqs_request"])
    add("CloudWatch Logs, idle", f"ticks and services, {IDLE_LOG_GB:g} GB, per GB",
        IDLE_LOG_GB * p["logs_gb"])
    add("EFS, Cloud Map", f"{inv.file_systems} file systems (1 GB each), {inv.namespaces} "
        "namespaces",
        inv.file_systems * p["efs_gb_month"] + inv.namespaces * p["hosted_zone_month"])
    cloudfront_usd, s3_usd = console_usd(inv)
    add("Web console, CloudFront and S3",
        f"{CONSOLE_USAGE['requests']:,.0f} requests and {CONSOLE_USAGE['gb']:g} GB a month, "
        f"within CloudFront's free tier (${cloudfront_usd:.2f}); S3 storage, reads and log "
        "deliveries", cloudfront_usd + s3_usd)
    if jobs:
        _per_job(rows, inv, jobs, arm)
    return rows


def _per_job(rows: list[Row], inv: Inventory, jobs: int, arm: str) -> None:
    p = PRICES
    rate = jobs / (HOURS * 3600)
    batch = 1 if rate < 10 else 5  # records a batch: 1 while jobs trickle, ~5 at tens a second
    gb_s = PER_JOB["gateway_gb_s"] + PER_JOB["submit_gb_s"] + PER_JOB["result_gb_s"]
    invokes = 1 + 2 / batch
    sqs = 2 + 4 / batch
    sampled = min(1.0, (1 + 0.05 * max(0.0, rate - 1)) / rate)
    traces = max(0.0, jobs * TRACED_FUNCTIONS * sampled - 100_000)
    network_gb = jobs * PER_JOB["network_bytes"] / GB
    network_price = p["endpoint_gb"] if inv.interface_endpoint_zones else p["nat_gb"]
    for item, basis, usd in (
        ("API Gateway", "1 request a job, per request", jobs * p["api_request"]),
        ("Lambda, jobs", f"{invokes:.1f} invocations and {gb_s:.3f} GB-s a job",
         jobs * (gb_s * p[f"lambda_gb_s{arm}"] + invokes * p["lambda_request"])),
        ("SQS, jobs", f"{sqs:.1f} requests a job (batches of {batch})",
         jobs * sqs * p["sqs_request"]),
        ("CloudWatch Logs, jobs", "2 KB a job, per GB",
         jobs * PER_JOB["log_bytes"] / GB * p["logs_gb"]),
        ("X-Ray", f"{sampled * TRACED_FUNCTIONS:.2f} traces a job, 100,000 free",
         traces * p["xray_trace"]),
        ("Endpoint or NAT data", "8 KB a job, per GB", network_gb * network_price),
    ):
        rows.append(Row(item, basis, usd))


def total(rows: list[Row]) -> float:
    return sum(r.monthly for r in rows)


def synth_template(context: Mapping[str, str]) -> dict[str, Any]:
    """The AWS stack's template for `context` (over cdk.json's), built in-process."""
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    import aws_cdk as cdk
    from cordum_infra.network_settings import deployment_target
    from cordum_infra.settings import StackSettings
    from cordum_infra.stack import STACK_NAME, CordumServerlessStack
    from synth import app_context

    with tempfile.TemporaryDirectory() as tmp:
        layer = Path(tmp) / "layer"
        (layer / "python").mkdir(parents=True)  # a stand-in: its size costs nothing here
        ctx = {"layerPath": str(layer), **app_context({}), **context}
        app = cdk.App(context=ctx, outdir=str(Path(tmp) / "cdk.out"))
        settings = StackSettings.from_context(app.node, code_staging_dir=Path(tmp) / "code")
        # Bound to the context's account and region when it names them, as app.py
        # binds it (the stream's load balancer needs its region).
        target = deployment_target(lambda key: app.node.try_get_context(key), {})
        env = cdk.Environment(account=target[0], region=target[1]) if target else None
        CordumServerlessStack(app, STACK_NAME, settings=settings, env=env)
        return dict(app.synth().get_stack_by_name(STACK_NAME).template)


SAMPLE_CONTEXT = {
    "natsUrl": "tls://nats.example.internal:4222",
    "natsCredentialsSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:nats-AbCdEf",
}
"""An outside NATS cluster (TLS, credentials): the AWS shape without NATS of its own."""
SAMPLE_STREAM = {
    "account": "123456789012",
    "region": "us-east-1",
    "streamCertificateArn": (
        "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    ),
}
"""The live event stream, in the sample account and region (whose lookups
tests/infra/fixtures/cdk.context.json answers); left out when the context names
another account or region."""
VOLUMES = {"idle": 0, "1M jobs": 1_000_000, "100M jobs": 100_000_000}


def table(inv: Inventory) -> str:
    """Markdown: one row per item, one column per volume (what each holds below it)."""
    by_volume = {name: monthly(inv, jobs=jobs) for name, jobs in VOLUMES.items()}
    items: dict[str, dict[str, Row]] = {}
    for name, rows in by_volume.items():
        for row in rows:
            items.setdefault(row.item, {})[name] = row
    lines = ["| what | " + " | ".join(VOLUMES) + " |", "|---|" + "---:|" * len(VOLUMES)]
    for item, cells in items.items():
        lines.append(f"| {item} | " + " | ".join(
            f"${cells[v].monthly:,.2f}" if v in cells else "" for v in VOLUMES) + " |")
    lines.append("| **total** | " + " | ".join(
        f"**${total(rows):,.0f}**" for rows in by_volume.values()) + " |")
    lines.append("")
    for item, cells in items.items():
        if len({row.basis for row in cells.values()}) == 1:
            lines.append(f"- {item}: {next(iter(cells.values())).basis}")
        else:
            lines.append(f"- {item}: " + "; ".join(f"{v}: {r.basis}" for v, r in cells.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.context)
    shapes = [{"egress": "endpoints"}, {"egress": "nat"}] if "egress" not in given else [{}]
    own_nats = any(given.get(k, "").lower() == "true" for k in ("natsCluster", "devNats"))
    for shape in shapes:
        sample_stream = {} if {"account", "region"} & set(given) else SAMPLE_STREAM
        context = {**({} if own_nats else SAMPLE_CONTEXT), **sample_stream, **shape, **given}
        inv = inventory(synth_template(context))
        print(f"\n### {', '.join(f'{k}={v}' for k, v in {**shape, **given}.items())}\n")
        print(table(inv))
        print(f"\nretention {inv.job_retention_s / 86400:g} days; "
              f"{math.ceil(inv.alarm_metrics)} alarm metrics over {inv.alarms} alarms")


if __name__ == "__main__":
    main()
