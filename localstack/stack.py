"""The local stack: ``make up`` / ``make down`` / the e2e harness.

``up`` brings everything up on this machine, each step safe to repeat:
Redis and NATS (only when nothing answers at REDIS_URL / NATS_URL), LocalStack
in host mode with the project's Lambda executor, the cordum layer, the dashboard
(dashboard/build.py), the CDK app deployed with cdklocal, then the safety kernel,
the NATS->SQS bridge, the live event stream, the console server and one echo
worker as background processes, each under a supervisor that restarts it when it
exits, and finally a demo job over HTTP. ``status`` shows every process,
its restarts and its last exit. ``down`` stops what ``up`` started (pid files
under .cordum/pids) and nothing else.

Runs under the project venv's Python; LocalStack and the CDK CLI live in
their own cached environments (localstack/launcher.py, infra/cdk/deploy.py).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "localstack"), str(ROOT / "infra" / "cdk"), str(ROOT / "shared")]

import launcher  # noqa: E402  (localstack/launcher.py)
import process_status  # noqa: E402  (localstack/process_status.py)
from artifact_bucket import ARTIFACT_BUCKET, ensure_artifact_bucket  # noqa: E402  (localstack/artifact_bucket.py)
from audit_bucket import AUDIT_BUCKET, ensure_audit_bucket  # noqa: E402  (localstack/audit_bucket.py)
from processes import tail  # noqa: E402  (localstack/processes.py)
from services import (  # noqa: E402  (localstack/services.py)
    LOGS,
    SAFETY_KERNEL_ADDR,
    SERVICES,
    STATE,
    config_dir,
    console_url,
    echo_worker_id,
    ensure_binary,
    ensure_nats,
    ensure_redis,
    ensure_redis_users,
    fail,
    read_pid,
    start_services,
    step,
    stop_process,
    stream_url,
)

ENV_FILE = STATE / "local.env"
OUTPUTS = STATE / "cdk-outputs.json"

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
TENANT = "default"
ADMIN_PRINCIPAL = "local-admin"
APPROVER_PRINCIPAL = "local-approver"
PLATFORM_PRINCIPAL = "local-policy-owner"
"""A second admin: approving a job takes another identity than the one that submitted it."""
OTHER_TENANT = "tenant-b"
"""The tenant of CORDUM_OTHER_TENANT_KEY, a user key that must never see ``default``'s work."""



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
        # The platform's policy owner: bundles govern every tenant, so only a key of
        # every tenant ("*") may change them (docs/policy.md).
        {"key": values["CORDUM_PLATFORM_KEY"], "tenant": "*", "role": "admin",
         "principal_id": PLATFORM_PRINCIPAL},
        # A user of a second tenant: what tenant isolation is shown with.
        {"key": values["CORDUM_OTHER_TENANT_KEY"], "tenant": OTHER_TENANT, "role": "user",
         "principal_id": "other-tenant-user"},
    ])


def api_url(outputs: dict[str, str], localstack_url: str) -> str:
    # LocalStack's *.localhost.localstack.cloud names do not resolve here:
    # use the path form of the REST API URL.
    return f"{localstack_url}/restapis/{outputs['RestApiId']}/{outputs['StageName']}/_user_request_"


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
    state = ""
    seen: list[str] = []
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
        "CORDUM_OTHER_TENANT_ID": OTHER_TENANT,
        "CORDUM_PLATFORM_KEY": previous.get("CORDUM_PLATFORM_KEY")
        or "ck_" + secrets.token_hex(16),
        "CORDUM_OTHER_TENANT_KEY": previous.get("CORDUM_OTHER_TENANT_KEY")
        or "ck_" + secrets.token_hex(16),
    }
    ensure_redis(values["REDIS_URL"])
    values.update(ensure_redis_users(values["REDIS_URL"], previous))
    ensure_nats(values["NATS_URL"])

    step("LocalStack (host mode, loopback)")
    launcher.start()
    values["LOCALSTACK_URL"] = launcher.localstack_url()

    step("building the cordum layer")
    run_logged("layer", [sys.executable, str(ROOT / "layers" / "build.py")])
    build_dashboard()

    step(f"audit bucket {ensure_audit_bucket(values['LOCALSTACK_URL'], values['REDIS_URL'])}")
    step(f"artifacts bucket {ensure_artifact_bucket(values['LOCALSTACK_URL'])}")

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
            "auditBucket": AUDIT_BUCKET,
            "artifactBucket": ARTIFACT_BUCKET,
            # The local chains carry hashes only: every checkout of this machine shares
            # its Redis, and a key of one checkout would fail the chains of another.
            # CORDUM_AUDIT_HMAC_KEY (64+ hex digits) in the environment signs them.
            **({"auditHmacKey": os.environ["CORDUM_AUDIT_HMAC_KEY"]}
               if os.environ.get("CORDUM_AUDIT_HMAC_KEY") else {}),
        },
        outputs_file=OUTPUTS,
        python=sys.executable,
        endpoint=values["LOCALSTACK_URL"],
    )
    values["CORDUM_API_URL"] = api_url(outputs, values["LOCALSTACK_URL"])
    values["CORDUM_STREAM_URL"] = stream_url()
    values["CORDUM_CONSOLE_URL"] = console_url()
    write_env(values)
    step(f"wrote {ENV_FILE.relative_to(ROOT)}")

    # The stream checks the gateway's keys (not written to the env file).
    start_services({**values, "CORDUM_API_KEYS": api_keys(values)}, outputs)
    step("waiting for the worker's first heartbeat in the registry snapshot")
    wait_for_worker(values, echo_worker_id())
    print(
        f"\nCordum Serverless is up.\n  API: {values['CORDUM_API_URL']}\n"
        f"  dashboard: {values['CORDUM_CONSOLE_URL']}/\n"
        f"  live events: {values['CORDUM_STREAM_URL']}/api/v1/stream\n"
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


def build_dashboard() -> None:
    """dashboard/dist, which the console server serves (skipped while it is fresh)."""
    step("building the dashboard (log: .cordum/logs/dashboard.log)")
    run_logged("dashboard", [sys.executable, str(ROOT / "dashboard" / "build.py"), "build",
                             "--python", sys.executable])


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
    """Run the e2e suite against the stack; a stack this started is stopped after. The
    browser tests drive Debian's chromium (CORDUM_CHROMIUM) on the console's dist/."""
    chromium = ensure_binary("chromium", "chromium")
    started = not is_up()
    if not started:
        build_dashboard()  # `up` builds it otherwise
    values = up(run_demo=False) if started else read_env()
    env = {**os.environ, **values, "CORDUM_CHROMIUM": chromium}
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
    p_status = sub.add_parser(
        "status", help="each process, its restarts and last exit; exit 0 when all run")
    p_status.add_argument("--json", action="store_true", help="machine-readable")
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
        rows = process_status.collect(launcher.status())
        if args.json:
            print(json.dumps(process_status.as_json(rows), indent=2))
        else:
            print(process_status.table(rows))
        raise SystemExit(0 if all(row.running for row in rows) else 1)
    elif args.cmd == "e2e":
        raise SystemExit(e2e(args.pytest_args))
    elif args.cmd == "demo":
        values = read_env()
        if not values:
            fail("no .cordum/local.env: run `make up` first")
        demo(values)


if __name__ == "__main__":
    main()
