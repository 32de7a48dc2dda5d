"""What host-mode LocalStack needs installed, built once in the project's cache.

Each folder is keyed by its pins and built atomically (layers/tool_cache.py):

* ``localstack-venv-<hash>``: Python 3.13 venv with requirements.txt, plus the
  project's Lambda executor plugin (executor/), reinstalled when its sources change;
* ``lambda-runtime-python3.12-<hash>``: the emulated /var/runtime (awslambdaric,
  boto3) installed for the python3.12 interpreter that runs functions.

Used by launcher.py (``ensure_installed()`` before a start). Standard library
only: it runs before any venv exists.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO / "layers") not in sys.path:
    sys.path.append(str(REPO / "layers"))

from processes import tail  # noqa: E402  (localstack/processes.py)
from tool_cache import (  # noqa: E402  (layers/tool_cache.py)
    build_atomically,
    cache_root,
    file_lock,
    remove_leftovers,
    short_hash,
)

REQUIREMENTS = HERE / "requirements.txt"
EXECUTOR_SRC = HERE / "executor"

STATE_DIR = REPO / ".cordum"
LOG_DIR = STATE_DIR / "logs"
INSTALL_LOG = LOG_DIR / "localstack-install.log"


@dataclass(frozen=True)
class LambdaRuntime:
    """A Lambda runtime the executor can run, and how to build it here."""

    name: str
    """Lambda's runtime identifier."""
    version: str
    """The interpreter's major.minor version."""
    override_env: str
    """Variable naming the interpreter to use instead of pyenv's."""
    requirements: tuple[str, ...]
    """What AWS's runtime image ships in /var/runtime; boto3 as pinned by the project."""


LAMBDA_RUNTIMES = (
    LambdaRuntime(
        "python3.12", "3.12", "CORDUM_PYTHON312", ("awslambdaric==4.2.2", "boto3==1.43.11")
    ),
)


class LauncherError(Exception):
    """Something the user must fix; the message says what."""


@dataclass(frozen=True)
class Installation:
    venv: Path
    runtimes: dict[str, dict[str, str]]
    """The executor's runtime map (CORDUM_LAMBDA_RUNTIMES): name -> {"python", "path"}."""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def _hash12(*parts: bytes) -> str:
    # Each part ends in a NUL, so that ("ab", "c") and ("a", "bc") differ.
    return short_hash(b"".join(part + b"\0" for part in parts))


# -- progress -------------------------------------------------------------------


def say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def _step(message: str) -> Iterator[None]:
    say(f"==> {message}")
    started = time.monotonic()
    yield
    say(f"    done in {time.monotonic() - started:.1f} s")




def _run_logged(command: list[str], what: str) -> None:
    """Run a long command with its output in INSTALL_LOG, not on the screen."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with INSTALL_LOG.open("a") as log:
        log.write(f"\n### {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise LauncherError(
            f"{what} failed (exit {result.returncode}); last lines of {INSTALL_LOG}:\n"
            + tail(INSTALL_LOG, 30)
        )


def _pip(python: str | Path, *args: str) -> list[str]:
    return [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        *args,
    ]


# -- interpreters -----------------------------------------------------------------


def _pyenv_root() -> Path:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True)
        if out.stdout.strip():
            return Path(out.stdout.strip())
    return Path.home() / ".pyenv"


def _find_python(version: str, override_env: str) -> str:
    """The interpreter for ``version``: the override variable, pyenv's newest, or PATH."""
    explicit = os.environ.get(override_env)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise LauncherError(f"{override_env}={explicit} is not an executable interpreter")
        return explicit
    exe = f"python{version}"
    candidates = glob.glob(str(_pyenv_root() / "versions" / f"{version}.*" / "bin" / exe))

    def version_key(path: str) -> tuple[int, ...]:
        release = Path(path).parent.parent.name
        return tuple(int(p) if p.isdigit() else -1 for p in release.split("."))

    for candidate in sorted(candidates, key=version_key, reverse=True):
        if os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which(exe)
    if on_path:
        return on_path
    raise LauncherError(
        f"Python {version} not found: set {override_env} to a python{version} interpreter, "
        f"or install it (e.g. `pyenv install {version}`)"
    )


# -- install -----------------------------------------------------------------------


def ensure_installed() -> Installation:
    """Build the LocalStack venv, the Lambda runtimes and the executor plugin if missing."""
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    venv = _ensure_localstack_venv(cache)
    _ensure_executor_plugin(venv)
    runtimes = {rt.name: ensure_lambda_runtime(rt, cache) for rt in LAMBDA_RUNTIMES}
    return Installation(venv=venv, runtimes=runtimes)


def _venv_works(venv: Path) -> bool:
    # The venv's python is a symlink to the base interpreter, which may be gone.
    return (venv / "bin" / "python").exists()


def _localstack_venv(cache: Path) -> Path:
    return cache / f"localstack-venv-{_hash12(REQUIREMENTS.read_bytes())}"


def _ensure_localstack_venv(cache: Path) -> Path:
    venv = _localstack_venv(cache)
    if _venv_works(venv):
        return venv
    with file_lock(cache / ".localstack-venv.lock"):
        if _venv_works(venv):
            return venv
        python = _find_python("3.13", "LOCALSTACK_PYTHON")

        def build(tmp: Path) -> None:
            with _step(f"LocalStack venv from {python} (first time: about 2 minutes)"):
                _run_logged([python, "-m", "venv", str(tmp)], "creating the LocalStack venv")
                _run_logged(
                    _pip(tmp / "bin" / "python", "-r", str(REQUIREMENTS)),
                    f"pip install -r {REQUIREMENTS}",
                )

        # Under the lock: any other temp folder is what a killed build left.
        remove_leftovers(venv)
        # Scripts in bin/ keep the temp path in their shebang; we only ever
        # run `bin/python -m ...`, which does not care.
        build_atomically(venv, build, replace=True)
    return venv


def _executor_digest() -> str:
    files = sorted(
        path
        for path in EXECUTOR_SRC.rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".toml")
        and "__pycache__" not in path.parts
        and not any(part.endswith(".egg-info") or part == "build" for part in path.parts)
    )
    parts = []
    for path in files:
        parts += [str(path.relative_to(EXECUTOR_SRC)).encode(), path.read_bytes()]
    return _hash12(*parts)


def _executor_stamp(venv: Path) -> Path:
    return venv / "cordum-local-executor.stamp"


def warn_if_executor_changed() -> None:
    """Say so when executor/ differs from the plugin installed in the LocalStack venv."""
    stamp = _executor_stamp(_localstack_venv(cache_root()))
    if stamp.exists() and stamp.read_text().strip() != _executor_digest():
        say("    note: executor/ changed since this LocalStack started; restart it to use that")


def _ensure_executor_plugin(venv: Path) -> None:
    stamp = _executor_stamp(venv)
    digest = _executor_digest()
    if stamp.exists() and stamp.read_text().strip() == digest:
        return
    with file_lock(venv.parent / ".localstack-venv.lock"):
        if stamp.exists() and stamp.read_text().strip() == digest:
            return
        with _step("Lambda executor plugin into the LocalStack venv"):
            # Build from a copy: setuptools leaves build/ and *.egg-info beside the sources.
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "executor"
                ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
                shutil.copytree(EXECUTOR_SRC, src, ignore=ignore)
                # setuptools comes with LocalStack's pins: no isolated build env to fetch.
                flags = ("--no-deps", "--no-build-isolation", "--force-reinstall")
                _run_logged(
                    _pip(venv / "bin" / "python", *flags, str(src)),
                    "installing the executor plugin",
                )
        stamp.write_text(digest + "\n")


_RUNTIME_CHECK = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "import awslambdaric.bootstrap, runtime_client, boto3"
)


def ensure_lambda_runtime(runtime: LambdaRuntime, cache: Path | None = None) -> dict[str, str]:
    """Build `runtime`'s emulated /var/runtime if missing: ``{"python", "path"}``."""
    cache = cache_root() if cache is None else cache
    python = _find_python(runtime.version, runtime.override_env)
    # The C extension in awslambdaric is built for this exact interpreter.
    identity = subprocess.run(
        [python, "-c", "import sys, platform; print(sys.version, platform.machine())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = _hash12("\n".join(runtime.requirements).encode(), identity.encode())
    target = cache / f"lambda-runtime-{runtime.name}-{key}"
    if not target.is_dir():
        with file_lock(cache / f".lambda-runtime-{runtime.name}.lock"):
            if not target.is_dir():

                def build(tmp: Path) -> None:
                    with _step(f"Lambda runtime {runtime.name} for {python}"):
                        _run_logged(
                            _pip(python, "--target", str(tmp), *runtime.requirements),
                            f"installing the {runtime.name} runtime",
                        )
                        # Isolated like a function: what it needs must come from tmp.
                        _run_logged(
                            [python, "-I", "-S", "-c", _RUNTIME_CHECK, str(tmp)],
                            f"checking the {runtime.name} runtime",
                        )

                remove_leftovers(target)
                build_atomically(target, build)
    return {"python": python, "path": str(target)}
