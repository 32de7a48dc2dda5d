"""LocalStack runtime executor that runs each Lambda environment as a local process.

One execution environment = one runtime process (the function's interpreter
running ``bootstrap.py`` -> ``awslambdaric``) plus one :class:`RuntimeApiServer`
inside LocalStack. Towards LocalStack the executor plays the part of
LocalStack's init inside a Docker container, through an ``ExecutorEndpoint``:

    LocalStack                 this executor                     runtime process
    start(env) ------------->  spawn, wait for the 1st poll  <--- GET next (init done)
        <-- endpoint.status_ready (or status_error + the init error document)
    invoke --> POST /invoke -> dispatch ---------------------->  handler runs
        <-- endpoint.invocation_logs, invocation_response|error <- POST response|error

Both sides of the server are private to this executor: the runtime process is given
a Runtime API address with a token of its own (a new one per process), and LocalStack's
endpoint posts ``/invoke`` under the executor's token (:class:`RuntimeApiEndpoint`);
other local processes get 403 (see :mod:`cordum_local_executor.runtime_api`).

A runtime that timed out or died is replaced on the next invoke, as AWS does.

Function output (stdout and stderr, one pipe, collected by
:mod:`cordum_local_executor.function_output`) becomes the invocation's logs,
framed by START/END/REPORT lines as on AWS, and LocalStack stores them in
CloudWatch Logs (/aws/lambda/<function>). With CORDUM_LAMBDA_LOG_DIR set, it is
also appended to <dir>/lambda-<function>.log as it is written.

Runtimes come from CORDUM_LAMBDA_RUNTIMES, a JSON map set by the launcher:
``{"python3.12": {"python": "/path/to/python3.12", "path": "/emulated/var/runtime"}}``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localstack.aws.api.lambda_ import PackageType
from localstack.services.lambda_.invocation.executor_endpoint import ExecutorEndpoint
from localstack.services.lambda_.invocation.lambda_models import (
    FunctionVersion,
    InvocationResult,
)
from localstack.services.lambda_.invocation.runtime_executor import (
    LambdaRuntimeException,
    RuntimeExecutor,
)
from werkzeug import Request

from cordum_local_executor.function_output import (
    FunctionOutput,
    function_log_file,
    peak_memory_mb,
)
from cordum_local_executor.invocation import (
    Invocation,
    InvocationOutcome,
    RuntimeExited,
    RuntimeInitError,
    error_document,
)
from cordum_local_executor.runtime_api import RuntimeApiServer
from cordum_local_executor.runtimes import RUNTIMES_ENV, configured_runtimes, runtime_spec
from localstack import config

LOG = logging.getLogger(__name__)

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
# What a runtime process sees of the host besides what LocalStack passes.
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class RuntimeApiEndpoint(ExecutorEndpoint):
    """LocalStack's endpoint for one environment, posting invocations to the Runtime
    API server's executor URL (which carries the server's invoke token) instead of
    ``http://<address>:<port>/invoke``, which the server refuses."""

    def __init__(self, executor_id: str, server: RuntimeApiServer, address: str) -> None:
        super().__init__(executor_id, container_address=address, container_port=server.port)
        self._invoke_url = server.invoke_url

    def _perform_invoke(
        self, invocation_url: str, proxies: dict[str, str], payload: dict[str, Any]
    ) -> Any:
        # LocalStack's own sender (retries on connection errors included), another URL.
        return super()._perform_invoke(
            invocation_url=self._invoke_url, proxies=proxies, payload=payload
        )


class LocalProcessRuntimeExecutor(RuntimeExecutor):
    """Runs a function's execution environment as a subprocess of LocalStack."""

    def __init__(self, id: str, function_version: FunctionVersion) -> None:  # noqa: A002
        super().__init__(id=id, function_version=function_version)
        self._server = RuntimeApiServer(invoke_handler=self._on_invoke)
        self._endpoint = RuntimeApiEndpoint(id, self._server, self.get_address())
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._watcher: threading.Thread | None = None
        self._output: FunctionOutput | None = None
        self._env: dict[str, str] = {}
        self._init_ms: float | None = None
        self._stopping = False

    # -- RuntimeExecutor ----------------------------------------------------

    def start(self, env_vars: dict[str, str]) -> None:
        self._endpoint.start()
        self._server.start()
        self._env = self._runtime_env(env_vars)
        try:
            self._start_runtime()
        except RuntimeInitError as exc:
            self._tell(self._endpoint.status_error, self.id, body=exc.payload)
        except (RuntimeExited, TimeoutError, OSError) as exc:
            body = error_document("Runtime.ExitError", str(exc))
            self._tell(self._endpoint.status_error, self.id, body=body)
        else:
            self._tell(self._endpoint.status_ready, self.id, body=b"")
        # Raises StatusErrorException with the error document after status_error.
        self._endpoint.wait_for_startup()

    def stop(self) -> None:
        self._stopping = True
        self._kill_runtime()
        self._server.stop()
        try:
            self._endpoint.shutdown()
        except Exception as exc:  # stop must not fail on an endpoint never started
            LOG.debug("Shutting down executor endpoint %s: %s", self.id, exc)
        if self._output:
            self._output.close()

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        host = config.GATEWAY_LISTEN[0].host
        return "127.0.0.1" if host in ("0.0.0.0", "", "::", "[::]") else host

    def get_runtime_endpoint(self) -> str:
        port = config.GATEWAY_LISTEN[0].port
        prefix = self._endpoint.get_endpoint_prefix()
        return f"http://{self.get_endpoint_from_executor()}:{port}{prefix}"

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        process = self._process
        if process is None or process.poll() is not None:
            # The last invocation timed out or the runtime died: AWS resets the
            # environment and runs init again before the next event.
            try:
                self._start_runtime()
            except (RuntimeInitError, RuntimeExited, TimeoutError, OSError) as exc:
                return self._init_failure(payload["invoke-id"], exc)
        return self._endpoint.invoke(payload)

    def get_logs(self) -> str:
        return self._output.tail() if self._output else ""

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        cfg = function_version.config
        if cfg.package_type != PackageType.Zip:
            raise LambdaRuntimeException(
                "The cordum-local Lambda executor runs zip functions only, not container images"
            )
        spec = runtime_spec(cfg.runtime)
        if not os.access(spec.python, os.X_OK):
            raise LambdaRuntimeException(f"Interpreter {spec.python} for {cfg.runtime} not found")
        if not os.path.isdir(spec.path):
            raise LambdaRuntimeException(f"Runtime folder {spec.path} for {cfg.runtime} not found")
        if cfg.code:
            cfg.code.prepare_for_execution()
        for layer in cfg.layers:
            if layer.code:
                layer.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        # Nothing beyond LocalStack's own unzipped code, which LocalStack removes.
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        try:
            runtimes = configured_runtimes()
        except LambdaRuntimeException as exc:
            LOG.warning("%s", exc)
            return False
        if not runtimes:
            LOG.warning("%s is not set: no Lambda runtime is available", RUNTIMES_ENV)
            return False
        return True

    # -- the runtime process ------------------------------------------------

    def _runtime_env(self, env_vars: dict[str, str]) -> dict[str, str]:
        cfg = self.function_version.config
        spec = runtime_spec(cfg.runtime)
        env = dict(BASE_ENV, TMPDIR=tempfile.gettempdir())
        env.update({key: str(value) for key, value in env_vars.items()})
        env.update(
            {
                # AWS_LAMBDA_RUNTIME_API is set per process (_start_runtime): its token
                # changes with every runtime started.
                "LAMBDA_TASK_ROOT": str(cfg.code.get_unzipped_code_location()),
                "LAMBDA_RUNTIME_DIR": spec.path,
                # awslambdaric polls on a thread for these, as on AWS.
                "AWS_EXECUTION_ENV": f"AWS_Lambda_{cfg.runtime}",
            }
        )
        # boto3 in the function must not pick up the host's ~/.aws files.
        env.setdefault("AWS_CONFIG_FILE", os.devnull)
        env.setdefault("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        return env

    def _start_runtime(self) -> None:
        """Start a runtime process and wait for its init to finish."""
        self._kill_runtime()
        self._server.reset()
        cfg = self.function_version.config
        spec = runtime_spec(cfg.runtime)
        if not cfg.handler:
            raise LambdaRuntimeException("function has no handler")
        layers = [
            str(layer.code.get_unzipped_code_location()) for layer in cfg.layers if layer.code
        ]
        command = [spec.python, "-I", "-S", "-B", str(BOOTSTRAP), cfg.handler, *layers]
        read_fd, write_fd = os.pipe()
        if self._output:
            self._output.close()
        log_file = function_log_file(self.function_version.id.function_name)
        self._output = FunctionOutput(read_fd, log_file)
        self._output.note(f"INIT_START Runtime Version: {cfg.runtime} ({spec.python})")
        started = time.monotonic()
        # After reset(): the token of this process, refused to any earlier one.
        env = dict(self._env, AWS_LAMBDA_RUNTIME_API=self._server.runtime_api)
        try:
            process = subprocess.Popen(
                command,
                env=env,
                cwd=self._env["LAMBDA_TASK_ROOT"],
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                # Own process group: a timeout kills whatever the function started too.
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        watcher = threading.Thread(
            target=self._watch, args=(process,), name=f"lambda-{self.id}", daemon=True
        )
        with self._lock:
            self._process, self._watcher = process, watcher
        watcher.start()
        self._server.wait_until_ready(timeout=config.LAMBDA_RUNTIME_ENVIRONMENT_TIMEOUT)
        self._init_ms = (time.monotonic() - started) * 1000

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        with self._lock:
            current = process is self._process
        if current:
            self._server.runtime_exited(f"Runtime exited with error: exit status {code}")

    def _kill_runtime(self) -> None:
        with self._lock:
            process, watcher = self._process, self._watcher
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
        # The watcher reports this death before any new runtime exists.
        if watcher and watcher is not threading.current_thread():
            watcher.join()

    def _init_failure(self, request_id: str, exc: Exception) -> InvocationResult:
        if isinstance(exc, RuntimeInitError):
            payload = exc.payload
        else:
            payload = error_document("Runtime.ExitError", f"RequestId: {request_id} Error: {exc}")
        logs = self._output.drain() if self._output else ""
        return InvocationResult(request_id, payload, is_error=True, logs=logs)

    # -- invocations --------------------------------------------------------

    def _on_invoke(self, body: bytes) -> None:
        """POST /invoke from the ExecutorEndpoint: hand the event to the runtime."""
        request = json.loads(body)
        request_id = request["invoke-id"]
        timeout_s = float(self.function_version.config.timeout)
        invocation = Invocation(
            request_id=request_id,
            payload=request["payload"].encode(),
            function_arn=request["invoked-function-arn"],
            deadline_ms=int(time.time() * 1000 + timeout_s * 1000),
            trace_id=request.get("trace-id", ""),
        )
        assert self._output is not None
        self._output.note(
            f"START RequestId: {request_id} Version: {self.function_version.id.qualifier}"
        )
        started = time.monotonic()
        self._server.dispatch(invocation, timeout_s, lambda outcome: self._report(outcome, started))

    def _report(self, outcome: InvocationOutcome, started: float) -> None:
        """Send the outcome to LocalStack the way its init does: logs first, then the result."""
        if self._stopping:
            return
        request_id = outcome.request_id
        duration_ms = (time.monotonic() - started) * 1000
        output = self._output
        assert output is not None
        if outcome.timed_out:
            timestamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            timeout_s = float(self.function_version.config.timeout)
            output.note(f"{timestamp} {request_id} Task timed out after {timeout_s:.2f} seconds")
            # The runtime is stuck in the handler; the next invoke starts a new one.
            self._kill_runtime()
        output.note(f"END RequestId: {request_id}")
        output.note(self._report_line(request_id, duration_ms))
        self._init_ms = None  # Init Duration is reported on the first invocation only
        logs = json.dumps({"logs": output.drain()}).encode()
        self._tell(self._endpoint.invocation_logs, request_id, body=logs)
        if outcome.is_error:
            self._tell(self._endpoint.invocation_error, request_id, body=outcome.payload)
        else:
            self._tell(self._endpoint.invocation_response, request_id, body=outcome.payload)

    def _report_line(self, request_id: str, duration_ms: float) -> str:
        memory = self.function_version.config.memory_size
        parts = [
            f"REPORT RequestId: {request_id}",
            f"Duration: {duration_ms:.2f} ms",
            f"Billed Duration: {int(duration_ms) + 1} ms",
            f"Memory Size: {memory} MB",
        ]
        used = peak_memory_mb(self._process)
        if used is not None:
            parts.append(f"Max Memory Used: {used} MB")
        if self._init_ms is not None:
            parts.append(f"Init Duration: {self._init_ms:.2f} ms")
        return "\t".join(parts)

    @staticmethod
    def _tell(endpoint_method: Callable[[Request, str], object], key: str, body: bytes) -> None:
        """Hand a status, logs or a result to the ExecutorEndpoint.

        An init in a container POSTs these to the endpoint's routes under
        LOCALSTACK_RUNTIME_ENDPOINT; being inside LocalStack's process, we call
        the same Endpoint methods with the same request, without two trips
        through the gateway per invocation.
        """
        request = Request.from_values(method="POST", data=body, content_type="application/json")
        try:
            endpoint_method(request, key)
        except Exception as exc:  # the environment may have been stopped meanwhile
            LOG.warning("Executor endpoint %s failed: %s", endpoint_method.__name__, exc)
