#!/usr/bin/env python3
"""Deploy (or synth) the CordumServerless CDK app with a pinned CDK CLI.

    python infra/cdk/deploy.py [deploy] --context redisUrl=redis://127.0.0.1:6379 \\
        --context natsUrl=nats://127.0.0.1:4222 --outputs .cordum/cdk-outputs.json
    python infra/cdk/deploy.py synth [--shape aws|aws-vpc|local] [--context k=v ...]
                                     [--out DIR] [--no-lint]

``deploy`` targets LocalStack (``cdklocal``, endpoint ``--endpoint``, default
http://127.0.0.1:4566): it bootstraps the environment when the CDKToolkit
stack is missing, deploys, and writes the stack outputs as JSON. ``synth``
synthesizes each stack shape (``aws``: its own VPC, cache, NATS cluster and
Fargate services; ``aws-vpc``: the same in an existing VPC with an outside
NATS; ``local``: given a Redis URL, what LocalStack runs) with sample context
(SYNTH_SHAPES, overridden by ``--context``; the AWS shapes' lookups answered
by tests/infra/fixtures/cdk.context.json) into ``<out>/<shape>/``, default
``infra/cdk/cdk.out``, cdk-nag included, then runs cfn-lint on every
template with ``infra/cdk/.cfnlintrc`` (synth.py).

The CLI is pinned and installed once into the project's cache (cdk_cli.py).

Python API: ``deploy_local(context, outputs_file, python, endpoint)`` here,
``synth(...)``, ``synth_shapes(...)``, ``lint_templates(...)`` in synth.py,
``ensure_cdk_cli()`` in cdk_cli.py.

Standard library only (python3.11+); needs node (and npm for ``deploy``);
the lint needs cfn-lint in `python`'s environment (the project's ``infra`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from cdk_cli import (
    LOCAL_CREDENTIALS,
    LOCAL_REGION,
    REPO_ROOT,
    STACK_NAME,
    DeployError,
    cli_env,
    default_python,
    ensure_cdk_cli,
    run_logged,
)
from synth import SYNTH_SHAPES, lint_templates, synth_shapes

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
LOCAL_ACCOUNT = "000000000000"
"""The account LocalStack maps the access key id ``test`` to."""

DEPLOY_TIMEOUT_S = 1200
"""A deploy that has not finished by then is stopped (LocalStack deploys of
this stack take well under a minute)."""

BOOTSTRAP_TIMEOUT_S = 600
ENDPOINT_WAIT_S = 30
"""How long a deploy waits for LocalStack's health endpoint to answer."""


def _app_command(python: str) -> str:
    # abspath, not resolve(): a venv's python is a symlink, and resolving it
    # would step out of the venv.
    return f"{shlex.quote(os.path.abspath(python))} app.py"


def _context_args(context: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in context.items():
        args += ["--context", f"{key}={value}"]
    return args


def wait_for_localstack(endpoint: str, timeout_s: float = ENDPOINT_WAIT_S) -> None:
    """Return once LocalStack's health endpoint answers; DeployError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    url = endpoint.rstrip("/") + "/_localstack/health"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise DeployError(f"LocalStack does not answer at {url} (waited {timeout_s:.0f} s)")
        time.sleep(1)


def _bootstrapped(endpoint: str, timeout_s: float = 10) -> bool:
    """True when the CDKToolkit stack exists in a complete state at `endpoint`.

    LocalStack does not check signatures; the credential scope in the header
    only tells it the service, region and (from the key id) account.
    """
    body = b"Action=DescribeStacks&StackName=CDKToolkit&Version=2010-05-15"
    request = urllib.request.Request(
        endpoint.rstrip("/") + "/",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential={LOCAL_CREDENTIALS}/20240101/{LOCAL_REGION}/"
                "cloudformation/aws4_request, SignedHeaders=content-type;host, Signature=0"
            ),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError:
        return False  # ValidationError: stack does not exist
    except (urllib.error.URLError, OSError) as exc:
        raise DeployError(f"LocalStack does not answer at {endpoint}: {exc}") from exc
    statuses = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")
    return any(f"<StackStatus>{status}</StackStatus>" in text for status in statuses)


def bootstrap_local(
    bin_dir: Path,
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    log: Path,
    say: Callable[[str], None] = print,
) -> bool:
    """Bootstrap the LocalStack environment unless done already; True if it ran."""
    if _bootstrapped(endpoint):
        return False
    cmd = [
        str(bin_dir / "cdklocal"),
        "bootstrap",
        f"aws://{LOCAL_ACCOUNT}/{LOCAL_REGION}",
        "--no-notices",
    ]
    # Run outside infra/cdk: with a cdk.json in sight, cdk synthesizes the app
    # even for an explicit environment, which would need a built layer and
    # the deploy's context.
    with tempfile.TemporaryDirectory(prefix="cordum-cdk-bootstrap-") as cwd:
        run_logged(
            cmd,
            env=cli_env(endpoint),
            log=log,
            label=f"cdklocal bootstrap ({endpoint})",
            timeout_s=BOOTSTRAP_TIMEOUT_S,
            say=say,
            cwd=Path(cwd),
        )
    return True


def deploy_local(
    context: dict[str, str],
    outputs_file: Path,
    python: str,
    endpoint: str = DEFAULT_ENDPOINT,
    *,
    say: Callable[[str], None] = print,
) -> dict[str, str]:
    """Deploy the stack to LocalStack at `endpoint`; return its outputs.

    `context` becomes ``-c key=value`` (see cordum_infra/settings.py for the
    keys); `python` runs ``app.py`` (it must have aws-cdk-lib). The outputs are
    also written to `outputs_file`; the logs and the cloud assembly (cdk.out)
    go beside it.
    """
    outputs_file = Path(outputs_file).resolve()
    outputs_file.parent.mkdir(parents=True, exist_ok=True)
    bin_dir = ensure_cdk_cli(say)
    wait_for_localstack(endpoint)
    bootstrap_local(
        bin_dir,
        endpoint=endpoint,
        log=outputs_file.parent / "cdk-bootstrap.log",
        say=say,
    )
    if outputs_file.exists():
        outputs_file.unlink()
    cmd = [
        str(bin_dir / "cdklocal"),
        "deploy",
        STACK_NAME,
        "--app",
        _app_command(python),
        "--require-approval",
        "never",
        "--outputs-file",
        str(outputs_file),
        # Beside the outputs, not infra/cdk/cdk.out: the CLI locks its output
        # folder, and a synth in the source tree must not block a deploy.
        "--output",
        str(outputs_file.parent / "cdk.out"),
        "--no-notices",
        "--progress",
        "events",
        *_context_args(context),
    ]
    run_logged(
        cmd,
        env=cli_env(endpoint),
        log=outputs_file.parent / "cdk-deploy.log",
        label=f"cdklocal deploy {STACK_NAME} ({endpoint})",
        timeout_s=DEPLOY_TIMEOUT_S,
        say=say,
    )
    try:
        outputs = json.loads(outputs_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeployError(f"deploy finished but wrote no readable {outputs_file}: {exc}") from exc
    return dict(outputs.get(STACK_NAME, {}))


def _parse_context(pairs: list[str]) -> dict[str, str]:
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--context takes key=value, got {pair!r}")
        context[key] = value
    return context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("deploy", "synth"), default="deploy")
    parser.add_argument(
        "--context",
        "-c",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CDK context (repeatable): natsUrl, redisUrl, safetyKernelAddr, layerPath, ...",
    )
    parser.add_argument(
        "--outputs",
        type=Path,
        default=REPO_ROOT / ".cordum" / "cdk-outputs.json",
        help="deploy: stack outputs file (default .cordum/cdk-outputs.json)",
    )
    parser.add_argument(
        "--out", type=Path, help="synth: folder of the cloud assemblies (<out>/<shape>)"
    )
    parser.add_argument(
        "--shape",
        action="append",
        choices=sorted(SYNTH_SHAPES),
        help="synth: one shape (repeatable; default all)",
    )
    parser.add_argument("--no-lint", action="store_true", help="synth: skip cfn-lint")
    parser.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="deploy: LocalStack URL")
    parser.add_argument(
        "--python", default=default_python(), help="interpreter running app.py (with aws-cdk-lib)"
    )
    args = parser.parse_args(argv)
    context = _parse_context(args.context)
    try:
        if args.command == "synth":
            templates = synth_shapes(context, args.python, args.out, args.shape)
            for shape, template in templates.items():
                print(f"template ({shape}): {template}")
            if not args.no_lint:
                lint_templates(list(templates.values()), args.python)
        else:
            outputs = deploy_local(context, args.outputs, args.python, args.endpoint)
            print(f"outputs ({args.outputs}):")
            for key in sorted(outputs):
                print(f"  {key} = {outputs[key]}")
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
