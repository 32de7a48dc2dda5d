"""The ``cordumctl`` command: global options, the command groups, and how a run ends.

Every failure ends as one line on stderr (``cordumctl: 404 job not found (not_found)``)
and an exit code per kind (:class:`cordumctl.errors.ExitCode`); a traceback means a bug.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from cordumctl.commands import (
    approvals,
    artifacts,
    audit,
    config,
    dlq,
    events,
    jobs,
    locks,
    policy,
    runs,
    schemas,
    system,
    traces,
    workflows,
)
from cordumctl.errors import CliError, ExitCode
from cordumctl.output import Format, shown
from cordumctl.session import Options, Runtime, Session

HELP = """Operate Cordum from the command line: jobs, approvals, the DLQ, workers,
health, workflows with their runs, the live event stream, the policy and the audit
chain.

The API's URL, key and tenant come together from one place, never mixed:
--url/--key/--tenant, else CORDUM_API_URL, CORDUM_API_KEY and CORDUM_TENANT_ID, else
the nearest .cordum/local.env (written by `make up`) in this folder or a parent. Giving
any of the flags means flags only, and setting any of the variables means the
environment only; that place must name both the URL and the key (the tenant defaults
to `default`), so a key is never sent to a URL from somewhere else. The live event
stream (`events`, and `watch` when it is served) is at the API's URL unless --stream-url
or CORDUM_STREAM_URL names another, from that same place.

These options go before the command or after it: `cordumctl jobs get ID -o json`.

Output is a table on a terminal and JSON otherwise (--output picks). Exit codes:
0 ok, 2 usage, 3 auth, 4 not found, 5 conflict, 6 unavailable, 7 rate limited,
8 invalid request; `watch` adds 10-15 for how a job or run ended.

Shell completion: `cordumctl --install-completion` (bash, zsh, fish, PowerShell)."""

GLOBAL_PANEL = "Global options"


def _url_option(**more: Any) -> Any:
    return typer.Option("--url", metavar="URL", show_default=False, **more,
                        help="The API's base URL (env CORDUM_API_URL); needs --key.")


def _key_option(**more: Any) -> Any:
    return typer.Option("--key", metavar="KEY", show_default=False, **more,
                        help="The API key (env CORDUM_API_KEY); needs --url; never printed.")


def _tenant_option(**more: Any) -> Any:
    return typer.Option(
        "--tenant", metavar="TENANT", show_default=False, **more,
        help="The tenant (env CORDUM_TENANT_ID, else default); needs --url and --key.")


def _stream_url_option(**more: Any) -> Any:
    return typer.Option(
        "--stream-url", metavar="URL", show_default=False, **more,
        help="The live event stream's base URL (env CORDUM_STREAM_URL, else the API's); "
             "needs --url and --key.")


def _output_option(**more: Any) -> Any:
    return typer.Option(
        "--output", "-o", show_default=False, case_sensitive=False, **more,
        help="table, json or yaml (default: table on a terminal, else json).")


def _given_after(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> None:
    """A global option given after the command's name goes to the session the root made."""
    if value is None or ctx.resilient_parsing or not param.name:
        return
    found = ctx.find_object(Session)
    if found is not None:
        found.update(param.name, value)


_AFTER: dict[str, Any] = {"callback": _given_after, "expose_value": False,
                          "rich_help_panel": GLOBAL_PANEL}


def _global_options_after(
    url: Annotated[str | None, _url_option(**_AFTER)] = None,
    key: Annotated[str | None, _key_option(**_AFTER)] = None,
    tenant: Annotated[str | None, _tenant_option(**_AFTER)] = None,
    stream_url: Annotated[str | None, _stream_url_option(**_AFTER)] = None,
    output: Annotated[Format | None, _output_option(**_AFTER)] = None,
) -> None:
    """Carries the global options as every command below the root takes them."""


@functools.cache
def global_options() -> tuple[Any, ...]:
    """The parameters of the global options as a command takes them (their values go to
    the session). Made once: a parameter keeps no value of its own, so commands share them."""
    carrier = typer.Typer(add_completion=False)
    carrier.command()(_global_options_after)
    return tuple(typer.main.get_command(carrier).params)


class RootGroup(TyperGroup):
    """The root: each command and group below it also takes the global options, so
    ``cordumctl jobs get ID --output json`` means ``cordumctl --output json jobs get ID``.

    The root's callback runs (and makes the session) before a command's own options are
    parsed; those land in the session then, before the command runs.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        below = list(self.commands.values())
        while below:
            command = below.pop()
            command.params.extend(global_options())
            if isinstance(command, TyperGroup):
                below.extend(command.commands.values())


app = typer.Typer(name="cordumctl", help=HELP, no_args_is_help=True, cls=RootGroup,
                  rich_markup_mode="markdown",
                  # Locals in a traceback could include the API key.
                  pretty_exceptions_show_locals=False,
                  context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(jobs.app, name="jobs")
app.add_typer(approvals.app, name="approvals")
app.add_typer(dlq.app, name="dlq")
app.add_typer(system.workers_app, name="workers")
app.command("status")(system.status)
app.add_typer(workflows.app, name="workflows")
app.add_typer(runs.app, name="runs")
app.command("events")(events.events)
app.add_typer(policy.app, name="policy")
app.add_typer(audit.app, name="audit")
app.add_typer(traces.app, name="traces")
app.add_typer(artifacts.app, name="artifacts")
app.add_typer(config.app, name="config")
app.add_typer(schemas.app, name="schemas")
app.add_typer(locks.app, name="locks")


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[str | None, _url_option()] = None,
    key: Annotated[str | None, _key_option()] = None,
    tenant: Annotated[str | None, _tenant_option()] = None,
    stream_url: Annotated[str | None, _stream_url_option()] = None,
    output: Annotated[Format | None, _output_option()] = None,
) -> None:
    runtime = ctx.obj if isinstance(ctx.obj, Runtime) else Runtime()
    s = Session(runtime, Options(url=url, key=key, tenant=tenant, output=output,
                                 stream_url=stream_url))
    ctx.obj = s
    ctx.call_on_close(s.close)


def main(argv: Sequence[str] | None = None, runtime: Runtime | None = None) -> int:
    """Run one command; the return value is the process's exit code."""
    runtime = runtime or Runtime()
    err = runtime.err_console or Console(stderr=True, soft_wrap=True)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=args, prog_name="cordumctl", standalone_mode=False, obj=runtime)
    except CliError as exc:
        err.print(shown(f"cordumctl: {exc}"), highlight=False, soft_wrap=True)
        return int(exc.exit_code)
    except typer.Abort:
        err.print("cordumctl: aborted", highlight=False, markup=False)
        return int(ExitCode.ERROR)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: the framework's own message
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        return int(getattr(exc, "exit_code", ExitCode.USAGE))
    return result if isinstance(result, int) else int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
