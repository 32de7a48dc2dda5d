"""Offline synth of the CDK app in both stack shapes, and cfn-lint over the templates.

``synth`` runs ``app.py`` itself, the way the CLI would, with ``cdk.json``'s
context: no CLI, no network, no credentials, no Docker (image assets are only
built by a deploy). cdk-nag runs inside the app. Entry point: ``deploy.py synth``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from cdk_cli import CDK_DIR, STACK_NAME, DeployError, cli_env, run_logged

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
