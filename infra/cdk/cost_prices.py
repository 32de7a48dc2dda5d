"""The prices and measured figures infra/cdk/costs.py multiplies: us-east-1 on-demand
list prices, 730 hours a month, and what a job costs from BENCHMARKS.md. Check them
against the AWS pricing pages before relying on a total."""

from __future__ import annotations

HOURS = 730
MINUTES = HOURS * 60
GB = 1024**3

PRICES: dict[str, float] = {
    "fargate_vcpu_hour": 0.04048, "fargate_gb_hour": 0.004445,          # Linux x86_64
    "fargate_vcpu_hour_arm": 0.03238, "fargate_gb_hour_arm": 0.00356,   # Linux arm64
    "lambda_gb_s": 0.0000166667, "lambda_gb_s_arm": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "nlb_hour": 0.0225,                       # + LCUs, about 0 at these rates
    "alb_hour": 0.0225, "alb_lcu_hour": 0.008,  # the stream's load balancer
    "interface_endpoint_zone_hour": 0.01, "endpoint_gb": 0.01,
    "nat_hour": 0.045, "nat_gb": 0.045,
    "public_ipv4_hour": 0.005,                # the NAT gateway's, the stream load balancer's
    "secret_month": 0.40,
    "kms_key_month": 1.00,
    "alarm_metric": 0.10,                     # per metric an alarm reads, standard resolution
    "dashboard_month": 3.00,                  # 3 free per account, counted here
    "custom_metric_month": 0.30,              # first 10,000 metrics
    "logs_gb": 0.50,                          # ingestion
    "api_request": 3.50 / 1e6,                # REST, first 333 million
    "sqs_request": 0.40 / 1e6,                # standard; first million free per account
    "xray_trace": 5.00 / 1e6,                 # first 100,000 free per month
    "efs_gb_month": 0.30,
    "hosted_zone_month": 0.50,                # a Cloud Map private namespace
    # The console (CloudFront pay-as-you-go, North America and Europe; S3 Standard)
    "cloudfront_gb": 0.085,                   # data out, first 10 TB
    "cloudfront_request": 0.01 / 10_000,      # HTTPS requests
    "cloudfront_function": 0.10 / 1e6,        # CloudFront Functions invocations
    "s3_gb_month": 0.023,
    "s3_get": 0.0004 / 1000, "s3_put": 0.005 / 1000,
}
"""us-east-1 list prices in USD."""

CACHE_NODES: dict[str, tuple[float, float]] = {
    "cache.t4g.micro": (0.5, 0.016),
    "cache.t4g.small": (1.37, 0.032),
    "cache.t4g.medium": (3.09, 0.065),
    "cache.m7g.large": (6.38, 0.158),
    "cache.r7g.large": (13.07, 0.219),
    "cache.r7g.xlarge": (26.32, 0.437),
    "cache.r7g.2xlarge": (52.82, 0.873),
    "cache.r7g.4xlarge": (105.81, 1.747),
}
"""Node type -> (memory GiB, USD per node-hour), Redis OSS on-demand; Valkey nodes
list 20 % lower (VALKEY_DISCOUNT)."""
VALKEY_DISCOUNT = 0.8
BYTES_PER_JOB = 4350
"""Redis memory of one job in its first day, measured (docs/deploy-sizing.md)."""
CACHE_USABLE = 0.75 * 0.80
"""Share of a node's memory the job store may fill: ElastiCache reserves 25 %
(reserved-memory-percent), and the RedisMemory alarm fires at 80 % of the rest."""

TICK_SECONDS = {"reconciler_tick": 31.0, "replayer_tick": 31.0, "workflow_tick": 50.0}
"""Billed seconds of one tick invocation (one a minute each): the reconciler and the
replayer tick twice, 30 s apart; the workflow tick ticks every few seconds until
its deadline, 52 s in."""
DEFAULT_TICK_SECONDS = 50.0

ESM_POLL_REQUESTS_PER_MINUTE = 15
"""An SQS event source keeps 5 pollers in 20 s long polls while the queue is empty:
15 ReceiveMessage requests a minute per queue."""
IDLE_LOG_GB = 1.0
"""Tick and service log lines, the bridge's EMF metrics (4 a minute per task)."""
BRIDGE_METRICS = 3
STREAM_METRICS = 3
"""StreamConnections, StreamFramesSent, StreamSlowClientsClosed (no dimension)."""
ALB_LCUS = 1.0
"""LCUs the stream's load balancer is billed a month, an estimate: one LCU is 3,000
open connections, 25 new ones a second or 1 GB of frames an hour (the largest of
the dimensions counts); a few hundred live clients use a fraction of it."""
ALB_PUBLIC_IPS = 2
"""Public IPv4 addresses of an internet-facing load balancer: one per zone (two),
more while it scales out; each billed as any public address."""
CONTAINER_INSIGHTS_METRICS = {"cluster": 9, "service": 22}
"""Custom metrics of standard Container Insights on ECS (cluster level; service plus
task-definition family level, per service): an estimate, check the first bill."""

# Per job, from BENCHMARKS.md (local stack, 2026-11-26).
PER_JOB = {
    # gateway handler, REPORT Duration p50 12 ms, at 1024 MB
    "gateway_gb_s": 0.012 * 1.0,
    # submit: receipt to worker publish (dispatch_latency) p50 16 ms, at 1024 MB
    "submit_gb_s": 0.016 * 1.0,
    # result: 2.4 ms CPU a job plus 3 Redis round trips; 10 ms assumed, at 512 MB
    "result_gb_s": 0.010 * 0.5,
    # access-log line, function log lines, EMF metrics
    "log_bytes": 2048,
    # request and result through SQS (and the endpoints or the NAT gateway)
    "network_bytes": 8192,
}
EMF_SERIES_WITH_JOBS = 50
"""Cordum metric series that receive data once jobs flow: about 5 per topic and status
for 10 topics (cordum_infra.metrics)."""
TRACED_FUNCTIONS = 3
"""Gateway, submit and result: X-Ray records the first request a second and 5 % of
the rest, per function."""

CLOUDFRONT_FREE = {"gb": 1024, "requests": 10_000_000, "functions": 2_000_000}
"""CloudFront's always-free tier, per account and month (every distribution of the
account draws on it): 1 TB out, 10 million HTTP(S) requests, 2 million function
invocations."""
CONSOLE_USAGE = {
    "requests": 2_000_000, "gb": 5.0, "page_loads": 50_000,
    "origin_gets": 100_000, "log_puts": 10_000, "stored_gb": 0.5,
}
"""A month of the web console, an estimate: a handful of operators with the dashboard
open through the working day, polling the API every few seconds (2 million requests,
5 GB of JSON and files); 50,000 page loads through the SPA function; 100,000 bucket
reads on cache misses; the log files CloudFront and S3 deliver (10,000 PUTs) and
0.5 GB of files and 90 days of logs stored. Requests through the console are API
requests too: each also costs what ``api_request`` and PER_JOB price."""
