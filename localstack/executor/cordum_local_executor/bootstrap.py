"""Entry point of a function's runtime process, the local stand-in for /var/runtime/bootstrap.

Run by the runtime's own interpreter as

    python3.12 -I -S -B bootstrap.py HANDLER [LAYER_DIR ...]

``-I`` ignores PYTHON* variables and the user site, ``-S`` keeps the
interpreter's site-packages (and their .pth hooks) away: what the function can
import is what this script puts on sys.path, in the order AWS uses:

    LAMBDA_TASK_ROOT, each layer's python/lib/python3.X/site-packages and
    python/ (the /opt of AWS), LAMBDA_RUNTIME_DIR (awslambdaric, boto3),
    then the standard library.

AWS extracts layers into one /opt, a later layer overwriting an earlier one's
files; with one folder per layer, the later layer goes first on sys.path to
win the same way.

The environment (AWS_LAMBDA_RUNTIME_API, LAMBDA_TASK_ROOT, _HANDLER, ...) is
set by the executor. Standard library only: nothing else is importable yet.

AWS_LAMBDA_RUNTIME_API is ``127.0.0.1:<port>/<token>``: the Runtime API answers only
requests under this process's token. awslambdaric's native client puts the value
before each path as it is; its Python side (the init error report) opens an
``http.client`` connection to it, which takes no path, so the runtime client is given
the address and the path prefix apart (:func:`split_runtime_api`).
"""

from __future__ import annotations

import os
import site
import sys


def function_sys_path(task_root: str, layer_dirs: list[str], runtime_dir: str) -> list[str]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    paths = [task_root]
    for layer in reversed(layer_dirs):
        paths.append(os.path.join(layer, "python", "lib", version, "site-packages"))
        paths.append(os.path.join(layer, "python"))
    paths.append(runtime_dir)
    return paths


def split_runtime_api(value: str) -> tuple[str, str]:
    """``host:port/token`` -> (``host:port``, ``/token``); no path -> (value, "")."""
    hostport, slash, path = value.partition("/")
    return hostport, (slash + path).rstrip("/")


def install_prefixed_client() -> None:
    """Make awslambdaric's runtime client send its Python-side calls under the
    AWS_LAMBDA_RUNTIME_API path prefix, as its native client does."""
    import awslambdaric.__main__ as ric_main
    from awslambdaric.lambda_runtime_client import LambdaRuntimeClient

    class PrefixedRuntimeClient(LambdaRuntimeClient):
        def __init__(self, lambda_runtime_address: str, *args: object, **kwargs: object) -> None:
            hostport, self._path_prefix = split_runtime_api(lambda_runtime_address)
            super().__init__(hostport, *args, **kwargs)

        def call_rapid(self, http_method: str, endpoint: str, *args: object,
                       **kwargs: object) -> object:
            return super().call_rapid(http_method, self._path_prefix + endpoint, *args, **kwargs)

    # __main__.main builds its client from this name.
    ric_main.LambdaRuntimeClient = PrefixedRuntimeClient


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: bootstrap.py HANDLER [LAYER_DIR ...]")
    handler, layer_dirs = argv[1], argv[2:]
    task_root = os.environ["LAMBDA_TASK_ROOT"]
    runtime_dir = os.environ["LAMBDA_RUNTIME_DIR"]

    own_paths = function_sys_path(task_root, layer_dirs, runtime_dir)
    sys.path[:] = own_paths + [p for p in sys.path if p]
    # Packages may rely on .pth files (namespace packages, path hooks); honour
    # those of the layers and the runtime dir, as site-packages would.
    for path in own_paths[1:]:
        if os.path.isdir(path):
            site.addsitedir(path)
    os.chdir(task_root)

    install_prefixed_client()
    from awslambdaric.__main__ import main as run_runtime

    run_runtime(["awslambdaric", handler])


if __name__ == "__main__":
    main(sys.argv)
