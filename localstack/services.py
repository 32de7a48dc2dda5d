"""The local stack's processes: Redis and NATS when nothing answers, and our services.

Redis and NATS are started on loopback only when nothing answers at REDIS_URL /
NATS_URL (their Debian packages are installed when missing); the safety
kernel, the NATS->SQS bridge, the live event stream, the console server (the
dashboard and the API at one origin, web_console.py) and one echo worker run as
background processes of the project venv's Python, each under a supervisor
(supervisor.py) that restarts it when it exits. Each has a pid file under .cordum/pids (for our
services it names the supervisor) and a log under .cordum/logs; stop_process()
stops only what such a pid file names, with its process group.

Used by stack.py, which orchestrates ``make up`` / ``make down``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from processes import alive, answers, group_members, tail  # localstack/processes.py
from supervisor import read_state  # localstack/supervisor.py

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".cordum"
PIDS = STATE / "pids"
LOGS = STATE / "logs"

SAFETY_KERNEL_ADDR = "127.0.0.1:50051"
SERVICES = ("safety-kernel", "bridge", "stream", "console", "echo-worker")
"""Our long-running processes, in start order (stopped in reverse)."""
SUPERVISOR = Path(__file__).resolve().with_name("supervisor.py")
START_CHECK_S = 1.0
"""A service still on its first child this long after its start did not exit at start."""


# ---------------------------------------------------------------- output


_t0 = time.monotonic()


def step(msg: str) -> None:
    print(f"==> [{time.monotonic() - _t0:5.1f}s] {msg}", flush=True)


def fail(msg: str) -> NoReturn:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)




# ---------------------------------------------------------------- processes


def pid_file(name: str) -> Path:
    return PIDS / f"{name}.pid"




def recorded_pid(name: str) -> int | None:
    """The pid in ``name``'s pid file, running or not."""
    try:
        return int(pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None


def read_pid(name: str) -> int | None:
    pid = recorded_pid(name)
    return pid if pid is not None and alive(pid) else None


def spawn(name: str, argv: list[str], env: dict[str, str]) -> int:
    PIDS.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    log = (LOGS / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid_file(name).write_text(str(proc.pid))
    return proc.pid


def stop_process(name: str, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``, to the process group of ``name``'s pid file:
    the process (started in a session of its own) and what it started that stayed in its
    group, as a supervisor's child does; also when the leader itself is already gone.
    False when nothing of it ran."""
    pid = recorded_pid(name)
    pid_file(name).unlink(missing_ok=True)
    if pid is None or not (alive(pid) or group_members(pid)):
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid) and not group_members(pid):
                return True
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
    return True


# ---------------------------------------------------------------- redis / nats


def host_port(url: str, default_port: int) -> tuple[str, int]:
    parsed = urllib.parse.urlparse(url.split(",")[0].strip())
    return parsed.hostname or "127.0.0.1", parsed.port or default_port




def ensure_binary(binary: str, package: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found:
        return found
    step(f"installing {package} (apt-get)")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", package],
        check=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if not found:
        fail(f"{binary} not found after installing {package}")
    return found


def ensure_redis(url: str) -> None:
    ensure_server("redis", "Redis", "REDIS_URL", url, 6379, lambda binary, port, data: [
        binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
        "--appendonly", "no", "--dir", str(data)])


def ensure_nats(url: str) -> None:
    ensure_server("nats", "NATS with JetStream", "NATS_URL", url, 4222,
                  lambda binary, port, data: [
                      binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(data)])


def ensure_server(name: str, label: str, env_var: str, url: str, default_port: int,
                  argv: Callable[[str, int, Path], list[str]]) -> None:
    """Use what answers at ``url``; else start ``<name>-server`` on loopback (the
    Debian package of that name is installed when missing). A remote URL that does
    not answer is an error: we only start servers on this machine."""
    host, port = host_port(url, default_port)
    if answers(host, port):
        step(f"{label} answers at {host}:{port}")
        return
    if host not in ("127.0.0.1", "localhost"):
        fail(f"nothing answers at {env_var}={url}")
    binary = ensure_binary(f"{name}-server", f"{name}-server")
    data = STATE / name
    data.mkdir(parents=True, exist_ok=True)
    step(f"starting {label} on {host}:{port}")
    spawn(name, argv(binary, port, data), dict(os.environ))
    wait_for(lambda: answers(host, port), 15, label, LOGS / f"{name}.log")


def wait_for(check, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    fail(
        f"{what} did not come up within {timeout:.0f}s"
        + (f"; last log lines:\n{tail(log)}" if log else "")
    )


def ensure_redis_users(url: str, previous: dict[str, str]) -> dict[str, str]:
    """Create (again) the Redis ACL users of cordum.redis_acl on the local Redis, as
    ElastiCache has them on AWS, and return their connection URLs as env-file values
    (``REDIS_<NAME>_URL``). A password already in ``previous`` (the env file of an
    earlier ``make up``) is kept, so running processes keep their access. The
    ``default`` user is left as it is: the test suite and tools connect with it."""
    import secrets

    import redis

    if str(ROOT / "shared") not in sys.path:
        sys.path.append(str(ROOT / "shared"))
    from cordum.redis_acl import USERS, setuser_args

    parts = urllib.parse.urlsplit(url)
    client = redis.Redis.from_url(url, socket_timeout=5)
    values: dict[str, str] = {}
    try:
        for user in USERS:
            key = f"REDIS_{user.name.upper().replace('-', '_')}_URL"
            known = urllib.parse.urlsplit(previous.get(key, "")).password
            password = urllib.parse.unquote(known) if known else secrets.token_hex(24)
            client.execute_command("ACL", "SETUSER", *setuser_args(user, password))
            netloc = f"{user.name}:{urllib.parse.quote(password, safe='')}@{parts.hostname}"
            if parts.port:
                netloc += f":{parts.port}"
            values[key] = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    except redis.RedisError as exc:
        fail(f"cannot create the Redis ACL users at {url}: {exc}")
    finally:
        client.close()
    step(f"Redis ACL users: {', '.join(user.name for user in USERS)}")
    return values


KERNEL_REDIS_URL = "REDIS_CORDUM_KERNEL_URL"
"""Env-file value: the URL the safety kernel connects with, as the kernel's ACL user."""
WORKER_REDIS_URL = "REDIS_CORDUM_WORKER_URL"
"""Env-file value: the URL the echo worker connects with, as the workers' ACL user."""
STREAM_REDIS_URL = "REDIS_CORDUM_STREAM_URL"
"""Env-file value: the URL the stream connects with, as its ACL user."""
STREAM_PORT = 8090
"""The live event stream's port on loopback (CORDUM_STREAM_URL in the env file)."""


def stream_url() -> str:
    return f"http://127.0.0.1:{STREAM_PORT}"


DEFAULT_CONSOLE_PORT = 8080
"""The console server's port on loopback unless CONSOLE_PORT names another
(CORDUM_CONSOLE_URL in the env file)."""
WEB_CONSOLE = Path(__file__).resolve().with_name("web_console.py")


def console_port() -> int:
    raw = os.environ.get("CONSOLE_PORT") or str(DEFAULT_CONSOLE_PORT)
    try:
        return int(raw)
    except ValueError:
        fail(f"CONSOLE_PORT is no port: {raw!r}")


def console_url() -> str:
    return f"http://127.0.0.1:{console_port()}"


# ---------------------------------------------------------------- services


def service_env(values: dict[str, str], outputs: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "shared"), env.get("PYTHONPATH", "")]).rstrip(":"),
        REDIS_URL=values["REDIS_URL"],
        NATS_URL=values["NATS_URL"],
        SAFETY_KERNEL_ADDR=SAFETY_KERNEL_ADDR,
        CORDUM_CONFIG_DIR=str(config_dir()),
        SUBMIT_QUEUE_URL=outputs["SubmitQueueUrl"],
        RESULT_QUEUE_URL=outputs["ResultQueueUrl"],
        AWS_ENDPOINT_URL=values["LOCALSTACK_URL"],
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


def start_services(values: dict[str, str], outputs: dict[str, str]) -> None:
    env = service_env(values, outputs)
    py = sys.executable
    argv = {
        "safety-kernel": [py, "-m", "cordum.safety.kernel", "--addr", SAFETY_KERNEL_ADDR],
        "bridge": [py, "-m", "cordum.bus.bridge"],
        "echo-worker": [py, "-m", "cordum.worker.echo"],
        "stream": [py, "-m", "cordum.stream"],
        "console": [py, str(WEB_CONSOLE)],
    }
    own_env = {
        # The kernel counts its velocity windows and reads the policy bundles only
        # (cordum.redis_acl.KERNEL), as on AWS; NATS_URL (shared) brings it
        # sys.config.changed, so a bundle change is in force within a moment.
        "safety-kernel": {"REDIS_URL": values.get(KERNEL_REDIS_URL) or env["REDIS_URL"]},
        # The worker reads ctx:* and writes res:* only (cordum.redis_acl.WORKERS).
        "echo-worker": {"WORKER_ID": echo_worker_id(),
                        "REDIS_URL": values.get(WORKER_REDIS_URL) or env["REDIS_URL"]},
        # The stream reads anywhere and writes its event logs only (redis_acl.STREAM);
        # it takes the gateway's keys.
        "stream": {"REDIS_URL": values.get(STREAM_REDIS_URL) or env["REDIS_URL"],
                   "STREAM_HOST": "127.0.0.1", "STREAM_PORT": str(STREAM_PORT),
                   "CORDUM_API_KEYS": values.get("CORDUM_API_KEYS", "")},
        # The console passes requests on as they came: it holds no key of its own.
        "console": {"CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": str(console_port()),
                    "CORDUM_API_URL": values["CORDUM_API_URL"],
                    "CORDUM_STREAM_URL": values["CORDUM_STREAM_URL"]},
    }
    for name in SERVICES:
        if stop_process(name):
            step(f"restarting {name}")
        else:
            step(f"starting {name}")
        spawn(name, [py, str(SUPERVISOR), "--name", name, "--", *argv[name]],
              {**env, **own_env.get(name, {})})
    time.sleep(START_CHECK_S)
    for name in SERVICES:
        if not running_first_child(name):
            again = " (restarted with backoff until `make down`)" if read_pid(name) else ""
            fail(f"{name} exited at start{again}; last log lines:\n"
                 f"{tail(LOGS / f'{name}.log')}")


def running_first_child(name: str) -> bool:
    """Whether the supervisor our pid file names still runs ``name``'s first child."""
    supervisor_pid = read_pid(name)
    state = read_state(name)
    return (
        state is not None
        and supervisor_pid is not None
        and state.supervisor_pid == supervisor_pid
        and state.child_pid is not None
        and alive(state.child_pid)
        and state.restarts == 0
    )


def echo_worker_id() -> str:
    return f"echo-{socket.gethostname()}"


def config_dir() -> Path:
    return Path(os.environ.get("CORDUM_CONFIG_DIR") or ROOT / "config").resolve()
