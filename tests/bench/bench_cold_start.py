"""Cold-start proxy: how long each functions/ module takes to import in a fresh
interpreter set up as Lambda sets one up, next to ``import boto3`` alone; and the
layer's size.

Each import runs in a new ``python3.12 -I -S -B`` process whose sys.path is the
one the local executor's bootstrap gives a function: the task root (the
functions/*.py and config/ staged as the CDK asset stages them), the layer
built by layers/build.py (with its python3.12 bytecode), then the Lambda
runtime folder (awslambdaric, boto3). The runs are interleaved module by
module, so a busy moment of the machine hits all of them alike. Run:

    python -m tests.bench.bench_cold_start [runs]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, cli, emit, env_int, figure, progress

MIB = 1024 * 1024

BENCH_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
             "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
             "POWERTOOLS_SERVICE_NAME": "bench",
             # As the CDK app sets it on every function (FUNCTION_ENV in
             # infra/cdk/cordum_infra/functions.py; tests/infra/test_synth.py).
             "PYDANTIC_DISABLE_PLUGINS": "1"}
"""The environment of each import, as Lambda's (the task root's config dir added)."""

# sys.path as localstack/executor's bootstrap.py builds it, then one timed import.
IMPORT_ONE = """
import os, site, sys, time, importlib
task_root, layer, runtime_dir, module = sys.argv[1:5]
paths = [task_root, os.path.join(layer, "python"), runtime_dir]
sys.path[:] = paths + [p for p in sys.path if p]
for p in paths[1:]:
    site.addsitedir(p)
os.chdir(task_root)
t0 = time.perf_counter()
importlib.import_module(module)
print((time.perf_counter() - t0) * 1000)
"""


def lambda_runtime() -> tuple[str, str]:
    """(python3.12, the emulated /var/runtime folder), built once in the project cache."""
    sys.path.insert(0, str(ROOT / "localstack"))
    import installation  # localstack/installation.py

    spec = installation.ensure_lambda_runtime(installation.LAMBDA_RUNTIMES[0])
    return spec["python"], spec["path"]


def build_layer(out: Path) -> Path:
    progress("building the layer (layers/build.py)")
    subprocess.run([sys.executable, str(ROOT / "layers" / "build.py"), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def stage_task_root(into: Path) -> Path:
    into.mkdir(parents=True)
    for module in sorted((ROOT / "functions").glob("*.py")):
        shutil.copy2(module, into / module.name)
    shutil.copytree(ROOT / "config", into / "config")
    return into


def import_ms(python: str, task_root: Path, layer: Path, runtime_dir: str, module: str,
              env: dict[str, str]) -> float:
    out = subprocess.run([python, "-I", "-S", "-B", "-c", IMPORT_ONE, str(task_root), str(layer),
                          runtime_dir, module], capture_output=True, text=True, env=env,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"importing {module} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = cli(__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", type=int, default=env_int("BENCH_IMPORT_RUNS", 7))
    args = parser.parse_args(argv)
    python, runtime_dir = lambda_runtime()
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cordum-bench-cold-") as tmp:
        layer = build_layer(Path(tmp) / "cordum-layer")
        task_root = stage_task_root(Path(tmp) / "task")
        modules = sorted(p.stem for p in (task_root).glob("*.py"))
        env = {**BENCH_ENV, "CORDUM_CONFIG_DIR": str(task_root / "config")}
        times: dict[str, list[float]] = {m: [] for m in [*modules, "boto3"]}
        for run in range(args.runs):
            for module in times:
                times[module].append(import_ms(python, task_root, layer, runtime_dir, module,
                                               env))
            progress(f"imports: run {run + 1}/{args.runs}")
        for module in modules:
            figures.append(figure(
                f"import_{module}", f"import functions/{module}.py (fresh python3.12)", "ms",
                times[module], budget="<= 400 ms", budget_value=400.0, floor=times["boto3"],
                note="floor column: `import boto3` alone, same run"))
        figures.append(figure("import_boto3", "import boto3 alone (fresh python3.12)", "ms",
                              times["boto3"]))
        unzipped = tree_bytes(layer) / MIB
        deps = (tree_bytes(layer) - tree_bytes(layer / "python" / "cordum")) / MIB
        zipped = Path(f"{layer}.zip").stat().st_size / MIB
        with zipfile.ZipFile(f"{layer}.zip") as zf:
            files = len(zf.namelist())
        figures += [
            figure("layer_unzipped", "layer size unzipped", "MiB", [unzipped],
                   budget="<= 80 MiB", budget_value=80.0, floor=[deps],
                   note="floor column: the third-party dependencies alone"),
            figure("layer_zipped", "layer size zipped", "MiB", [zipped], budget="<= 30 MiB",
                   budget_value=30.0),
        ]
    emit(args.json, figures, {"runs": args.runs, "python": python, "runtime_dir": runtime_dir,
                              "layer_files": files})


if __name__ == "__main__":
    main()
