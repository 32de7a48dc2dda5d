"""``cordumctl workers`` and ``cordumctl status``: what serves the jobs, and its health.

``cordumctl workers`` alone lists the workers (as it always has); ``cordumctl workers get
WORKER_ID`` shows one worker and the tenant's newest jobs it ran or runs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table
from rich.text import Text

from cordumctl.errors import ApiError, ExitCode
from cordumctl.output import Column, Format, age, duration, shown, text
from cordumctl.session import session

if TYPE_CHECKING:
    from cordumctl.session import Session


def _load(worker: dict[str, Any]) -> str:
    active, most = worker.get("active_jobs"), worker.get("max_parallel_jobs")
    jobs = f"{active if active is not None else '-'}/{most or '-'}"
    cpu = worker.get("cpu_load")
    return jobs + (f"  cpu {cpu:.0f}%" if isinstance(cpu, int | float) else "")


def _heartbeat(worker: dict[str, Any]) -> str:
    seconds = worker.get("heartbeat_age_seconds")
    when = duration(seconds) + " ago" if isinstance(seconds, int | float) else "-"
    return when if worker.get("online", True) else f"{when} (offline)"


WORKER_COLUMNS = [
    Column("WORKER", "worker_id"), Column("POOL", "pool"), Column("LOAD", _load),
    Column("HEARTBEAT", _heartbeat), Column("CAPABILITIES", "capabilities"),
]


WORKER_FIELDS = [
    Column("worker", "worker_id"), Column("pool", "pool"), Column("load", _load),
    Column("heartbeat", _heartbeat), Column("last heartbeat", "last_heartbeat"),
    Column("capabilities", "capabilities"), Column("region", "region"),
    Column("type", "type"), Column("labels", "labels"),
]
WORKER_JOB_COLUMNS = [
    Column("JOB", "id"), Column("STATE", "state"), Column("TOPIC", "topic"),
    Column("UPDATED", lambda j: _updated(j.get("updated_at"))), Column("TRACE", "trace_id"),
]
WORKERS = "/api/v1/workers"

workers_app = typer.Typer(help="Workers known to the registry; `get` shows one and its jobs.",
                          invoke_without_command=True, no_args_is_help=False)


def _updated(value: Any) -> str:
    """A JobRecord's ``updated_at`` (µs since the epoch) as how long ago."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return age(datetime.fromtimestamp(value / 1e6, UTC).isoformat()) + " ago"


@workers_app.callback()
def workers(
    ctx: typer.Context,
    pool: Annotated[str | None, typer.Option(help="Only the workers of this pool.")] = None,
) -> None:
    """Workers known to the registry: pool, load (active/max jobs) and heartbeat age."""
    if ctx.invoked_subcommand is not None:
        return
    s = session(ctx)
    answer = s.client.get(WORKERS) or {}
    items = [w for w in answer.get("items") or [] if pool is None or w.get("pool") == pool]
    s.printer.rows(items, WORKER_COLUMNS, raw={"items": items}, empty="no workers")


@workers_app.command("get")
def get_worker(
    ctx: typer.Context,
    worker_id: Annotated[str, typer.Argument(help="The worker's id.")],
    limit: Annotated[int, typer.Option(min=1, max=100, help="Jobs shown at most.")] = 20,
) -> None:
    """One worker (pool, load, heartbeat, capabilities, labels) and the tenant's newest jobs
    it ran or runs. A worker gone from the registry is still shown by its jobs."""
    s = session(ctx)
    path = f"{WORKERS}/{quote(worker_id, safe=':@~')}"
    worker: dict[str, Any] | None
    try:
        worker = s.client.get(path) or {}
    except ApiError as exc:
        if exc.status != 404:
            raise
        worker = None
    jobs = (s.client.get(f"{path}/jobs", {"limit": limit}) or {}).get("items") or []
    if s.format is not Format.TABLE:
        s.printer.data({"worker": worker, "jobs": jobs})
        return
    if worker is None:
        s.console.print(shown(f"worker {worker_id} is not in the registry (gone)", "dim"))
    else:
        s.printer.record(worker, WORKER_FIELDS)
    s.console.print()
    s.printer.rows(jobs, WORKER_JOB_COLUMNS, empty="no jobs of this tenant")


def _ok(flag: Any) -> Text:
    return Text("ok", style="green") if flag else Text("down", style="red")


def status(ctx: typer.Context) -> None:
    """Health of each part: the API, Redis, NATS, the workers; for admins the circuit
    breakers too. Exits 6 when a part is down."""
    s = session(ctx)
    health: dict[str, Any]
    try:
        health = s.client.get("/api/v1/health") or {}
    except ApiError as exc:
        if exc.status != 503:
            raise
        health = {"status": "unhealthy", "error": exc.error, "unavailable": exc.unavailable}
    body = s.client.get("/api/v1/status") or {}
    doc = {"health": health, "status": body}
    healthy = (health.get("status") == "healthy"
               and (body.get("redis") or {}).get("connected", False)
               and (body.get("nats") or {}).get("connected", False))
    if s.format is not Format.TABLE:
        s.printer.data(doc)
    else:
        _status_table(s, health, body)
    if not healthy:
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


def _breaker_rows(body: dict[str, Any]) -> list[tuple[Text, Text, Text]]:
    """One row per circuit breaker (admins only get them), as printable text."""
    rows = []
    for name, breaker in (body.get("circuit_breakers") or {}).items():
        view = breaker if isinstance(breaker, dict) else {"state": breaker}
        state = str(view.get("state") or "UNKNOWN")
        look = shown(state, "green" if state == "CLOSED" else "red")
        detail = f"failures {text(view.get('failures'))}/{text(view.get('fail_threshold'))}"
        if view.get("cooldown_remaining_ms"):
            detail += f", cooldown {duration(view['cooldown_remaining_ms'] / 1000)}"
        rows.append((shown(f"breaker {name}"), look, shown(detail)))
    if "input_fail_open_total" in body:
        rows.append((Text("fail-open"), shown(str(body["input_fail_open_total"])),
                     Text("input checks let through while the kernel was down")))
    return rows


def _status_table(s: Session, health: dict[str, Any], body: dict[str, Any]) -> None:
    redis, nats = body.get("redis") or {}, body.get("nats") or {}
    rows = [
        (Text("api"), _ok(health.get("status") == "healthy"),
         shown(text(health.get("error") or health.get("unavailable")))),
        (Text("redis"), _ok(redis.get("connected")), shown(text(redis.get("url")))),
        (Text("nats"), _ok(nats.get("connected")), shown(text(nats.get("url")))),
        (Text("workers"), shown(str(body.get("workers", "-"))), Text("online")),
        *_breaker_rows(body),
    ]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in ("PART", "STATE", "DETAIL"):
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    s.console.print(table)
    build = body.get("build") or {}
    s.console.print(shown(f"version {text(build.get('version'))}, "
                          f"up {duration(body.get('uptime_seconds'))}", "dim"))
