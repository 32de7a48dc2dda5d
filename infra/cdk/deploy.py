#!/usr/bin/env python3
"""Deploy (or synth) the CordumServerless CDK app with a pinned CDK CLI.

    python infra/cdk/deploy.py [deploy] --context redisUrl=redis://127.0.0.1:6379 \\
        --context natsUrl=nats://127.0.0.1:4222 --outputs .cordum/cdk-outputs.json
    python infra/cdk/deploy.py synth [--shape aws|local] [--context k=v ...] [--out DIR]
                                     [--no-lint]

``deploy`` targets LocalStack (``cdklocal``, endpoint ``--endpoint``, default
http://127.0.0.1:4566): it bootstraps the environment when the CDKToolkit
stack is missing, deploys, and writes the stack outputs as JSON. ``synth``
synthesizes both stack shapes (``aws``: VPC, cache, Fargate services;
``local``: given a Redis URL, what LocalStack runs) with sample context
(SYNTH_SHAPES, overridden by ``--context``) into ``<out>/<shape>/``, default
``infra/cdk/cdk.out``, cdk-nag included, then runs cfn-lint on both
templates with ``infra/cdk/.cfnlintrc``. It runs ``app.py`` itself, the way
the CLI would, with ``cdk.json``'s context: no CLI, no network, no
credentials, no Docker (image assets are only built by a deploy).

The CLI (npm ``aws-cdk`` and ``aws-cdk-local`` at the pins below) is installed
once into ``<cache>/cdk-cli-<hash of the pins>/node_modules``, outside the
clone, where ``<cache>`` is ``${CORDUM_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/cordum-serverless}``.

Python API: ``ensure_cdk_cli()``, ``deploy_local(context, outputs_file, python,
endpoint)``, ``synth(context, python, out_dir)``, ``synth_shapes(...)``,
``lint_templates(templates, python)``.

Standard library only (python3.11+); needs node (and npm for ``deploy``);
the lint needs cfn-lint in `python`'s environment (the project's ``infra`` extra).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

CDK_DIR = Path(__file__).resolve().parent
REPO_ROOT = CDK_DIR.parents[1]
STACK_NAME = "CordumServerless"

NPM_PINS = {"aws-cdk": "2.1148.1", "aws-cdk-local": "3.0.4"}
"""CDK CLI packages; the CLI must be at least as new as aws-cdk-lib's cloud
assembly version (aws-cdk-lib 2.275.0 here)."""

SYNTH_SHAPES: dict[str, dict[str, str]] = {
    "aws": {"natsUrl": "nats://nats.cordum.internal:4222"},
    "local": {"redisUrl": "redis://127.0.0.1:6379", "natsUrl": "nats://127.0.0.1:4222"},
}
"""Sample context per stack shape for ``synth``: enough to build each template
(a NATS address inside the VPC, a local Redis); ``--context`` adds or overrides."""

CFN_LINT_CONFIG = CDK_DIR / ".cfnlintrc"
"""cfn-lint settings for the synthesized templates (regions, ignored checks with
their reasons)."""

SYNTH_TIMEOUT_S = 600

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
LOCAL_REGION = "us-east-1"
LOCAL_CREDENTIALS = "test"
LOCAL_ACCOUNT = "000000000000"
"""The account LocalStack maps the access key id ``test`` to."""

DEPLOY_TIMEOUT_S = 1200
"""A deploy that has not finished by then is stopped (LocalStack deploys of
this stack take well under a minute)."""

BOOTSTRAP_TIMEOUT_S = 600
ENDPOINT_WAIT_S = 30
"""How long a deploy waits for LocalStack's health endpoint to answer."""
LOG_TAIL_LINES = 40


class DeployError(RuntimeError):
    """The CLI could not be installed, or a cdk command failed."""


def cache_root() -> Path:
    """Cache folder shared by the project's tools (outside the clone)."""
    explicit = os.environ.get("CORDUM_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "cordum-serverless"


def _package_json() -> str:
    return json.dumps(
        {"name": "cordum-cdk-cli", "private": True, "dependencies": NPM_PINS},
        indent=2,
        sort_keys=True,
    )


def cli_dir() -> Path:
    """Where the pinned CLI lives: ``<cache>/cdk-cli-<hash12 of the pins>``."""
    digest = hashlib.sha256(_package_json().encode()).hexdigest()[:12]
    return cache_root() / f"cdk-cli-{digest}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def ensure_cdk_cli(say: Callable[[str], None] = print) -> Path:
    """Install the pinned CLI when missing; return its ``node_modules/.bin``.

    npm installs into a temporary folder beside the final one, renamed into
    place when complete: an interrupted install never looks finished.
    """
    final = cli_dir()
    bin_dir = final / "node_modules" / ".bin"
    if (bin_dir / "cdklocal").exists() and (bin_dir / "cdk").exists():
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        raise DeployError("npm not found: install Node.js (20+) and npm")
    pins = " ".join(f"{name}@{version}" for name, version in NPM_PINS.items())
    say(f"==> CDK CLI: npm install {pins} into {final} (first time: a few seconds)")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    log = final.with_name(f"{final.name}.npm.log")
    try:
        (tmp / "package.json").write_text(_package_json() + "\n", encoding="utf-8")
        with log.open("w", encoding="utf-8") as fh:
            proc = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=tmp,
                stdout=fh,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            raise DeployError(f"npm install {pins} failed:\n{_tail(log)}")
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process installed the same pins first: use theirs.
            if not (bin_dir / "cdklocal").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return bin_dir


def default_python() -> str:
    """The project venv's interpreter when present, else this one."""
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def cli_env(endpoint: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a cdk / cdklocal run; `endpoint` None: no LocalStack settings."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "CDK_DISABLE_VERSION_CHECK": "1",
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18,20",
            "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        }
    )
    if endpoint is not None:
        # Never let a developer's real AWS profile or session leak into a local deploy.
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            env.pop(key, None)
        env.update(
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ENDPOINT_URL_S3": endpoint,
                "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS,
                "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS,
                "AWS_DEFAULT_REGION": LOCAL_REGION,
                "AWS_REGION": LOCAL_REGION,
            }
        )
    return env


def _app_command(python: str) -> str:
    # abspath, not resolve(): a venv's python is a symlink, and resolving it
    # would step out of the venv.
    return f"{shlex.quote(os.path.abspath(python))} app.py"


def _context_args(context: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in context.items():
        args += ["--context", f"{key}={value}"]
    return args


def _run_logged(
    cmd: list[str],
    *,
    env: Mapping[str, str],
    log: Path,
    label: str,
    timeout_s: float,
    say: Callable[[str], None],
    cwd: Path = CDK_DIR,
) -> None:
    """Run `cmd` (in infra/cdk) with its output in `log`, showing one progress line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"==> {label} (log: {log})")
    started = time.monotonic()
    tty = sys.stdout.isatty()
    with log.open("w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env), stdout=fh, stderr=subprocess.STDOUT)
        last_report = 0.0
        try:
            while proc.poll() is None:
                time.sleep(1)
                elapsed = time.monotonic() - started
                if elapsed > timeout_s:
                    proc.kill()
                    proc.wait()
                    raise DeployError(
                        f"{label}: no result after {timeout_s:.0f} s, stopped\n"
                        f"--- {log} (tail) ---\n{_tail(log)}"
                    )
                if tty:
                    sys.stdout.write(f"\r    {elapsed:4.0f} s  {_progress(log)}"[:100].ljust(100))
                    sys.stdout.flush()
                elif elapsed - last_report >= 15:
                    last_report = elapsed
                    say(f"    {elapsed:.0f} s {_progress(log)}".rstrip())
        except BaseException:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
        finally:
            if tty:
                sys.stdout.write("\r" + " " * 100 + "\r")
                sys.stdout.flush()
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise DeployError(
            f"{label} failed (exit {proc.returncode}) after {elapsed:.0f} s\n"
            f"--- {log} (tail) ---\n{_tail(log)}"
        )
    say(f"    done in {elapsed:.0f} s")


def _progress(log: Path) -> str:
    """The last CloudFormation progress line of a cdk log (``12/40 | ... | Resource``)."""
    try:
        with log.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 5 and "/" in parts[1]:
            return f"{parts[1]} {parts[3]} {parts[-1][:50]}"
    return ""


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
        _run_logged(
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
    _run_logged(
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


def app_context(context: Mapping[str, str]) -> dict[str, object]:
    """The context the CLI would hand the app: ``cdk.json``, ``cdk.context.json``
    (when present), then `context`."""
    merged: dict[str, object] = {}
    for name, key in (("cdk.json", "context"), ("cdk.context.json", None)):
        path = CDK_DIR / name
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
    _run_logged(
        [os.path.abspath(python), "app.py"],
        env=env,
        log=out_dir.parent / f"{out_dir.name}.synth.log",
        label=f"synth {STACK_NAME} -> {out_dir}",
        timeout_s=SYNTH_TIMEOUT_S,
        say=say,
    )
    if not template_path(out_dir).is_file():
        raise DeployError(f"synth wrote no template: {template_path(out_dir)}")
    return out_dir


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
    for shape in shapes or list(SYNTH_SHAPES):
        assembly = synth({**SYNTH_SHAPES[shape], **context}, python, root / shape, say=say)
        templates[shape] = template_path(assembly)
    return templates


def lint_templates(
    templates: list[Path], python: str, *, say: Callable[[str], None] = print
) -> None:
    """cfn-lint (`python`'s, with CFN_LINT_CONFIG) on `templates`; DeployError on a finding."""
    # cfn-lint has no ``python -m`` entry: call the console script's main().
    cmd = [os.path.abspath(python), "-c", "import sys; from cfnlint.runner import main; "
           "sys.exit(main())", "--config-file", str(CFN_LINT_CONFIG), "--", *map(str, templates)]
    say(f"==> cfn-lint {' '.join(p.parent.name + '/' + p.name for p in templates)}")
    proc = subprocess.run(
        cmd, cwd=CDK_DIR, env=cli_env(None), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise DeployError(
            f"cfn-lint found problems (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    say("    no findings")


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
        "--shape", action="append", choices=sorted(SYNTH_SHAPES),
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
