"""Offline synth of the CDK app in each stack shape, and cfn-lint over the templates.

``synth`` runs ``app.py`` itself, the way the CLI would, with ``cdk.json``'s
context: no CLI, no network, no credentials, no Docker (image assets are only
built by a deploy). cdk-nag runs inside the app. Entry point: ``deploy.py synth``.

The AWS shapes name a sample account and region, so the app makes the lookups a
real deploy makes (an existing VPC, the region's zones, its S3 prefix list);
LOOKUP_FIXTURE answers them the way the CLI's cdk.context.json cache would, and
a lookup it does not answer fails the synth instead of leaving CDK's
placeholder values in the template.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from cdk_cli import CDK_DIR, REPO_ROOT, STACK_NAME, DeployError, cli_env, run_logged

FIXTURES = REPO_ROOT / "tests" / "infra" / "fixtures"
LOOKUP_FIXTURE = FIXTURES / "cdk.context.json"
"""Answers to the AWS shapes' lookups in SAMPLE_TARGET (a VPC with public, private
and isolated subnets in two zones, the region's zones, its S3 prefix list), in
the format of the CLI's cdk.context.json. tests/infra/test_deploy_network.py
reads it too."""

SAMPLE_TARGET = {"account": "123456789012", "region": "us-east-1"}
"""Account and region of the AWS shapes: AWS's documentation account id, never a
real one, so no lookup of a real deploy can collide with the fixture's."""

SAMPLE_STREAM_CERTIFICATE = (
    "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
)
"""An ACM certificate ARN in SAMPLE_TARGET (never a real one): both AWS shapes run the
live event stream behind its load balancer, so make synth checks it in both."""
SAMPLE_CONSOLE_CERTIFICATE = (
    "arn:aws:acm:us-east-1:123456789012:certificate/5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
)
"""An ACM certificate ARN in us-east-1 (CloudFront's region; never a real one) for the
web console's own name in the aws-vpc shape; the aws shape keeps the cloudfront.net name."""

SYNTH_SHAPES: dict[str, dict[str, str]] = {
    # The stack's own VPC (chosen block and zones, public subnets added for the
    # stream's load balancer) and its own NATS cluster.
    "aws": {
        **SAMPLE_TARGET,
        "natsCluster": "true",
        "streamCertificateArn": SAMPLE_STREAM_CERTIFICATE,
        "vpcCidr": "10.40.0.0/16",
        "availabilityZones": "us-east-1a,us-east-1b",
    },
    # An existing VPC, an outside NATS over TLS, a larger cache node.
    "aws-vpc": {
        **SAMPLE_TARGET,
        "vpcId": "vpc-0c0d0e0f101112131",
        "cacheNodeType": "cache.r7g.large",
        "natsUrl": "tls://nats.example.internal:4222",
        "natsCredentialsSecretArn": (
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
        ),
        # The outside cluster's private CA (a sample certificate, no key anywhere).
        "natsCa": str(FIXTURES / "nats-ca.pem"),
        # The stream's load balancer in the VPC's public subnets, at a name of its own.
        "streamCertificateArn": SAMPLE_STREAM_CERTIFICATE,
        "streamDomain": "stream.example.com",
        # The web console at a name of its own (TLS 1.2 minimum), more edge locations.
        "consoleDomain": "console.example.com",
        "consoleCertificateArn": SAMPLE_CONSOLE_CERTIFICATE,
        "consolePriceClass": "200",
    },
    "local": {"redisUrl": "redis://127.0.0.1:6379", "natsUrl": "nats://127.0.0.1:4222",
              "auditBucket": "cordum-audit-local", "auditHmacKey": "ab" * 32},
}
"""Sample context per stack shape for ``synth``: enough to build each template;
``--context`` adds or overrides. Three synths of about 20 s each (cdk-nag
included) on a laptop core; each AWS shape covers a placement and a NATS of
its own rather than one shape per key."""

CFN_LINT_CONFIG = CDK_DIR / ".cfnlintrc"
"""cfn-lint settings for the synthesized templates (regions, ignored checks with
their reasons)."""

SYNTH_TIMEOUT_S = 600


def app_context(context: Mapping[str, str]) -> dict[str, object]:
    """The context the CLI would hand the app: ``cdk.json``, LOOKUP_FIXTURE,
    ``cdk.context.json`` (when present), then `context`."""
    merged: dict[str, object] = {}
    for path, key in (
        (CDK_DIR / "cdk.json", "context"),
        (LOOKUP_FIXTURE, None),
        (CDK_DIR / "cdk.context.json", None),
    ):
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            merged.update(data.get(key, {}) if key else data)
    merged.update(context)
    return merged


def synth(
    context: dict[str, str],
    python: str,
    out_dir: Path | None = None,
    *,
    say: Callable[[str], None] = print,
) -> Path:
    """Synthesize the app into `out_dir` (offline: no CLI, no credentials, no Docker);
    return the cloud assembly folder. The app exits non-zero on a cdk-nag finding."""
    out_dir = Path(out_dir or CDK_DIR / "cdk.out").resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        # A fresh assembly each time (no stale asset folders), but never wipe a
        # folder that is not one.
        if not (out_dir / "manifest.json").exists():
            raise DeployError(f"{out_dir} exists and is not a cloud assembly: choose another --out")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = cli_env(None)
    env["CDK_OUTDIR"] = str(out_dir)
    env["CDK_CONTEXT_JSON"] = json.dumps(app_context(context))
    run_logged(
        [os.path.abspath(python), "app.py"],
        env=env,
        log=out_dir.parent / f"{out_dir.name}.synth.log",
        label=f"synth {STACK_NAME} -> {out_dir}",
        timeout_s=SYNTH_TIMEOUT_S,
        say=say,
    )
    if not template_path(out_dir).is_file():
        raise DeployError(f"synth wrote no template: {template_path(out_dir)}")
    missing = unanswered_lookups(out_dir)
    if missing:
        raise DeployError(
            "the app made lookups no context answers (the template holds CDK's placeholder "
            f"values): {', '.join(missing)}. Add their answers to {LOOKUP_FIXTURE} (offline "
            "synth), or run `cdk synth` with credentials, which makes them"
        )
    return out_dir


def unanswered_lookups(assembly: Path) -> list[str]:
    """Keys of the context lookups the app made that its context did not answer."""
    manifest = json.loads((assembly / "manifest.json").read_text(encoding="utf-8"))
    return [str(entry["key"]) for entry in manifest.get("missing", [])]


def template_path(assembly: Path) -> Path:
    return assembly / f"{STACK_NAME}.template.json"


def synth_shapes(
    context: Mapping[str, str],
    python: str,
    out_dir: Path | None = None,
    shapes: list[str] | None = None,
    *,
    say: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Synthesize each shape of SYNTH_SHAPES into ``<out_dir>/<shape>``; return the
    template of each. `context` overrides the sample values of every shape."""
    root = Path(out_dir or CDK_DIR / "cdk.out").resolve()
    templates: dict[str, Path] = {}
    chosen = shapes or list(SYNTH_SHAPES)
    for number, shape in enumerate(chosen, 1):
        sample = ", ".join(f"{k}={v}" for k, v in SYNTH_SHAPES[shape].items())
        say(f"==> [{number}/{len(chosen)}] shape {shape}: {sample}")
        assembly = synth({**SYNTH_SHAPES[shape], **context}, python, root / shape, say=say)
        templates[shape] = template_path(assembly)
    return templates


def lint_templates(
    templates: list[Path], python: str, *, say: Callable[[str], None] = print
) -> None:
    """cfn-lint (`python`'s, with CFN_LINT_CONFIG) on `templates`; DeployError on a finding."""
    # cfn-lint has no ``python -m`` entry: call the console script's main().
    cmd = [
        os.path.abspath(python),
        "-c",
        "import sys; from cfnlint.runner import main; sys.exit(main())",
        "--config-file",
        str(CFN_LINT_CONFIG),
        "--",
        *map(str, templates),
    ]
    say(f"==> cfn-lint {' '.join(p.parent.name + '/' + p.name for p in templates)}")
    proc = subprocess.run(
        cmd, cwd=CDK_DIR, env=cli_env(None), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise DeployError(
            f"cfn-lint found problems (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    say("    no findings")
