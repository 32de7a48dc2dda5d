"""The local stack: ``make up`` / ``make down`` / the e2e harness.

``up`` brings everything up on this machine, each step safe to repeat:
Redis and NATS (only when nothing answers at REDIS_URL / NATS_URL), LocalStack
in host mode with the project's Lambda executor, the cordum layer, the CDK app
deployed with cdklocal, then the safety kernel, the NATS->SQS bridge and one
echo worker as background processes, and finally a demo job over HTTP.
``down`` stops what ``up`` started (pid files under .cordum/pids) and nothing else.

Runs under the project venv's Python; LocalStack and the CDK CLI live in
their own cached environments (localstack/launcher.py, infra/cdk/deploy.py).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".cordum"
PIDS = STATE / "pids"
LOGS = STATE / "logs"
ENV_FILE = STATE / "local.env"
OUTPUTS = STATE / "cdk-outputs.json"

sys.path[:0] = [str(ROOT / "localstack"), str(ROOT / "infra" / "cdk")]

import launcher  # noqa: E402  (localstack/launcher.py)

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
SAFETY_KERNEL_ADDR = "127.0.0.1:50051"
TENANT = "default"
ADMIN_PRINCIPAL = "local-admin"
APPROVER_PRINCIPAL = "local-approver"
"""A second admin: approving a job takes another identity than the one that submitted it."""
SERVICES = ("safety-kernel", "bridge", "echo-worker")
"""Our long-running processes, in start order (stopped in reverse)."""


# ---------------------------------------------------------------- output


_t0 = time.monotonic()


def step(msg: str) -> None:
    print(f"==> [{time.monotonic() - _t0:5.1f}s] {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------- processes


def pid_file(name: str) -> Path:
    return PIDS / f"{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); it is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def read_pid(name: str) -> int | None:
    try:
        pid = int(pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


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
    pid = read_pid(name)
    pid_file(name).unlink(missing_ok=True)
    if pid is None:
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid):
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


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


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


# ---------------------------------------------------------------- env file


def read_env() -> dict[str, str]:
    env: dict[str, str] = {}
    if ENV_FILE.exists():
        for line in ENV_FILE.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    return env


def write_env(values: dict[str, str]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    lines = ["# Written by `make up`: the local stack's endpoints and credentials."]
    lines += [f"{k}={v}" for k, v in values.items()]
    ENV_FILE.write_text("\n".join(lines) + "\n")
    ENV_FILE.chmod(0o600)


def api_keys(values: dict[str, str]) -> str:
    """CORDUM_API_KEYS of the local gateway: each key names its role, tenant and principal
    (an entry without them would be a mere user)."""
    return json.dumps([
        {"key": values["CORDUM_API_KEY"], "tenant": TENANT, "role": "admin",
         "principal_id": ADMIN_PRINCIPAL},
        {"key": values["CORDUM_APPROVER_KEY"], "tenant": TENANT, "role": "admin",
         "principal_id": APPROVER_PRINCIPAL},
    ])


def api_url(outputs: dict[str, str], localstack_url: str) -> str:
    # LocalStack's *.localhost.localstack.cloud names do not resolve here:
    # use the path form of the REST API URL.
    return f"{localstack_url}/restapis/{outputs['RestApiId']}/{outputs['StageName']}/_user_request_"


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
    }
    for name in SERVICES:
        if stop_process(name):
            step(f"restarting {name}")
        else:
            step(f"starting {name}")
        spawn(
            name,
            argv[name],
            {**env, "WORKER_ID": echo_worker_id()} if name == "echo-worker" else env,
        )
    time.sleep(1.0)
    for name in SERVICES:
        if read_pid(name) is None:
            fail(f"{name} exited at start; last log lines:\n{tail(LOGS / f'{name}.log')}")


def echo_worker_id() -> str:
    return f"echo-{socket.gethostname()}"


def config_dir() -> Path:
    return Path(os.environ.get("CORDUM_CONFIG_DIR") or ROOT / "config").resolve()


# ---------------------------------------------------------------- http


def http(
    method: str, url: str, key: str, body: dict | None = None, timeout: float = 30.0
) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"X-API-Key": key, "X-Tenant-ID": TENANT, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def _seen_since(worker: dict, since: float) -> bool:
    from datetime import datetime

    stamp = worker.get("last_heartbeat") or ""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= since
    except ValueError:
        return False


def wait_for_worker(values: dict[str, str], worker_id: str, timeout: float = 30.0) -> None:
    import redis

    client = redis.Redis.from_url(values["REDIS_URL"])
    started = time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Our worker, heard from since it was started: the snapshot key may still hold
        # workers of an earlier run.
        raw = client.get("sys:workers:snapshot")
        for worker in (json.loads(raw).get("workers") or []) if raw else []:
            if worker.get("worker_id") == worker_id and _seen_since(worker, started - 1):
                return
        time.sleep(0.5)
    fail(
        "no worker appeared in sys:workers:snapshot; see .cordum/logs/bridge.log and "
        "echo-worker.log"
    )


TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "DENIED", "OUTPUT_QUARANTINED"}


def demo(values: dict[str, str], timeout: float = 90.0) -> str:
    url, key = values["CORDUM_API_URL"], values["CORDUM_API_KEY"]
    step(f"demo job: POST {url}/api/v1/jobs")
    status, body = http(
        "POST", f"{url}/api/v1/jobs", key, {"topic": "job.echo", "prompt": "hello from make up"}
    )
    if status != 200 or not isinstance(body, dict):
        fail(f"submit answered {status}: {body}")
    job_id = body["job_id"]
    state, seen = "", []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, job = http("GET", f"{url}/api/v1/jobs/{job_id}", key)
        if status == 200 and isinstance(job, dict):
            state = job["state"]
            if not seen or seen[-1] != state:
                seen.append(state)
                step(f"job {job_id}: {state}")
            if state in TERMINAL:
                print(json.dumps(job, indent=2))
                print(f"\ndemo job {job_id}: {state} (states seen: {' -> '.join(seen)})")
                return state
        time.sleep(0.5)
    fail(f"demo job {job_id} not terminal after {timeout:.0f}s (last state {state or '?'})")
    return state


# ---------------------------------------------------------------- commands


def up(run_demo: bool = True) -> dict[str, str]:
    previous = read_env()
    values = {
        "REDIS_URL": os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL,
        "NATS_URL": os.environ.get("NATS_URL") or DEFAULT_NATS_URL,
        "CORDUM_TENANT_ID": TENANT,
        "CORDUM_API_KEY": previous.get("CORDUM_API_KEY") or "ck_" + secrets.token_hex(16),
        "CORDUM_APPROVER_KEY": previous.get("CORDUM_APPROVER_KEY")
        or "ck_" + secrets.token_hex(16),
    }
    ensure_redis(values["REDIS_URL"])
    ensure_nats(values["NATS_URL"])

    step("LocalStack (host mode, loopback)")
    launcher.start()
    values["LOCALSTACK_URL"] = launcher.localstack_url()

    step("building the cordum layer")
    run_logged("layer", [sys.executable, str(ROOT / "layers" / "build.py")])

    step("deploying the CDK app with cdklocal (log: .cordum/cdk-deploy.log)")
    import deploy  # infra/cdk/deploy.py

    outputs = deploy.deploy_local(
        context={
            "redisUrl": values["REDIS_URL"],
            "natsUrl": values["NATS_URL"],
            "safetyKernelAddr": SAFETY_KERNEL_ADDR,
            "apiKeys": api_keys(values),
            "configDir": str(config_dir()),
            "layerPath": str(ROOT / "layers" / "build" / "cordum-layer"),
        },
        outputs_file=OUTPUTS,
        python=sys.executable,
        endpoint=values["LOCALSTACK_URL"],
    )
    values["CORDUM_API_URL"] = api_url(outputs, values["LOCALSTACK_URL"])
    write_env(values)
    step(f"wrote {ENV_FILE.relative_to(ROOT)}")

    start_services(values, outputs)
    step("waiting for the worker's first heartbeat in the registry snapshot")
    wait_for_worker(values, echo_worker_id())
    print(
        f"\nCordum Serverless is up.\n  API: {values['CORDUM_API_URL']}\n"
        f"  env: {ENV_FILE}  (source it: set -a; . {ENV_FILE}; set +a)\n",
        flush=True,
    )
    if run_demo:
        state = demo(values)
        if state != "SUCCEEDED":
            fail(f"demo job ended {state}")
    return values


def run_logged(name: str, argv: list[str]) -> None:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    with log.open("w") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    print(tail(log, 5), flush=True)
    if proc.returncode != 0:
        fail(f"{' '.join(argv[:3])} failed; last log lines:\n{tail(log)}")


def down() -> None:
    for name in reversed(SERVICES):
        if stop_process(name):
            step(f"stopped {name}")
    step("stopping LocalStack")
    launcher.stop()
    for name in ("nats", "redis"):
        if stop_process(name):
            step(f"stopped {name} (started by make up)")
    step("down")


def e2e(pytest_args: list[str]) -> int:
    """Run the e2e suite against the stack; a stack this started is stopped after."""
    started = not is_up()
    values = up(run_demo=False) if started else read_env()
    env = {**os.environ, **values}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "shared"), str(ROOT)])
    args = [a for a in pytest_args if a != "--"] or ["tests/e2e"]
    try:
        step(f"pytest {' '.join(args)}")
        return subprocess.run([sys.executable, "-m", "pytest", *args], env=env, cwd=ROOT).returncode
    finally:
        if started:
            down()


def is_up() -> bool:
    return launcher.is_running() and all(read_pid(n) for n in SERVICES)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stack", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring the stack up and run the demo job")
    p_up.add_argument("--no-demo", action="store_true")
    sub.add_parser("down", help="stop everything `up` started")
    sub.add_parser("services", help="make sure Redis and NATS answer (start them if not)")
    sub.add_parser("status", help="exit 0 when the stack is up")
    sub.add_parser("demo", help="submit the demo job to the running stack")
    p_e2e = sub.add_parser(
        "e2e", help="run pytest on the stack, bringing it up (and down) when it is not up already"
    )
    p_e2e.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "up":
        up(run_demo=not args.no_demo)
    elif args.cmd == "down":
        down()
    elif args.cmd == "services":
        ensure_redis(os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL)
        ensure_nats(os.environ.get("NATS_URL") or DEFAULT_NATS_URL)
    elif args.cmd == "status":
        running = {n: bool(read_pid(n)) for n in SERVICES}
        running["localstack"] = launcher.is_running()
        print(json.dumps(running))
        raise SystemExit(0 if all(running.values()) else 1)
    elif args.cmd == "e2e":
        raise SystemExit(e2e(args.pytest_args))
    elif args.cmd == "demo":
        values = read_env()
        if not values:
            fail("no .cordum/local.env: run `make up` first")
        demo(values)


if __name__ == "__main__":
    main()
