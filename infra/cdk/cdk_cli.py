"""The pinned CDK CLI and how this project runs cdk commands.

The CLI (npm ``aws-cdk`` and ``aws-cdk-local`` at NPM_PINS) is installed once
into ``<cache>/cdk-cli-<hash of the pins>/node_modules``, outside the clone,
where ``<cache>`` is ``${CORDUM_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/cordum-serverless}``
(layers/tool_cache.py). Commands run with their output in a log file and one
progress line on the screen (:func:`run_logged`).

Used by deploy.py (LocalStack deploys) and synth.py. Standard library only
(python3.11+); the install needs node and npm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

CDK_DIR = Path(__file__).resolve().parent
REPO_ROOT = CDK_DIR.parents[1]
if str(REPO_ROOT / "layers") not in sys.path:
    sys.path.append(str(REPO_ROOT / "layers"))

from tool_cache import build_atomically, cache_root, short_hash, tail  # noqa: E402

STACK_NAME = "CordumServerless"

NPM_PINS = {"aws-cdk": "2.1148.1", "aws-cdk-local": "3.0.4"}
"""CDK CLI packages; the CLI must be at least as new as aws-cdk-lib's cloud
assembly version (aws-cdk-lib 2.275.0 here)."""

LOCAL_REGION = "us-east-1"
LOCAL_CREDENTIALS = "test"
"""What a LocalStack run is given instead of a developer's AWS settings."""



class DeployError(RuntimeError):
    """The CLI could not be installed, or a cdk command failed."""


def _package_json() -> str:
    return json.dumps(
        {"name": "cordum-cdk-cli", "private": True, "dependencies": NPM_PINS},
        indent=2,
        sort_keys=True,
    )


def cli_dir() -> Path:
    """Where the pinned CLI lives: ``<cache>/cdk-cli-<hash12 of the pins>``."""
    return cache_root() / f"cdk-cli-{short_hash(_package_json().encode())}"



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
    log = final.with_name(f"{final.name}.npm.log")

    def install(tmp: Path) -> None:
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
            raise DeployError(f"npm install {pins} failed:\n{tail(log)}")

    # Another process installing the same pins first is fine: theirs is kept.
    build_atomically(final, install)
    if not (bin_dir / "cdklocal").exists():
        raise DeployError(f"{final} holds no CDK CLI: remove it and run again")
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


def run_logged(
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
                        f"--- {log} (tail) ---\n{tail(log)}"
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
            f"--- {log} (tail) ---\n{tail(log)}"
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
