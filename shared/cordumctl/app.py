"""The ``cordumctl`` command: global options, the command groups, and how a run ends.

Every failure ends as one line on stderr (``cordumctl: 404 job not found (not_found)``)
and an exit code per kind (:class:`cordumctl.errors.ExitCode`); a traceback means a bug.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console

from cordumctl.commands import approvals, dlq, jobs, runs, system, workflows
from cordumctl.errors import CliError, ExitCode
from cordumctl.output import Format, shown
from cordumctl.session import Options, Runtime, Session

HELP = """Operate Cordum from the command line: jobs, approvals, the DLQ, workers,
health, and workflows with their runs.

The API's URL, key and tenant come together from one place, never mixed:
--url/--key/--tenant, else CORDUM_API_URL, CORDUM_API_KEY and CORDUM_TENANT_ID, else
the nearest .cordum/local.env (written by `make up`) in this folder or a parent. Giving
any of the flags means flags only, and setting any of the variables means the
environment only; that place must name both the URL and the key (the tenant defaults
to `default`), so a key is never sent to a URL from somewhere else.

Output is a table on a terminal and JSON otherwise (--output picks). Exit codes:
0 ok, 2 usage, 3 auth, 4 not found, 5 conflict, 6 unavailable, 7 rate limited,
8 invalid request; `watch` adds 10-15 for how a job or run ended.

Shell completion: `cordumctl --install-completion` (bash, zsh, fish, PowerShell)."""

app = typer.Typer(name="cordumctl", help=HELP, no_args_is_help=True, 
                  rich_markup_mode="markdown",
                  # Locals in a traceback could include the API key.
                  pretty_exceptions_show_locals=False,
                  context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(jobs.app, name="jobs")
app.add_typer(approvals.app, name="approvals")
app.add_typer(dlq.app, name="dlq")
app.command("workers")(system.workers)
app.command("status")(system.status)
app.add_typer(workflows.app, name="workflows")
app.add_typer(runs.app, name="runs")


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(
        "--url", metavar="URL", help="The API's base URL (env CORDUM_API_URL); needs --key.",
        show_default=False)] = None,
    key: Annotated[str | None, typer.Option(
        "--key", metavar="KEY",
        help="The API key (env CORDUM_API_KEY); needs --url; never printed.",
        show_default=False)] = None,
    tenant: Annotated[str | None, typer.Option(
        "--tenant", metavar="TENANT",
        help="The tenant (env CORDUM_TENANT_ID, else default); needs --url and --key.",
        show_default=False)] = None,
    output: Annotated[Format | None, typer.Option(
        "--output", "-o", help="table, json or yaml (default: table on a terminal, else json).",
        show_default=False, case_sensitive=False)] = None,
) -> None:
    runtime = ctx.obj if isinstance(ctx.obj, Runtime) else Runtime()
    s = Session(runtime, Options(url=url, key=key, tenant=tenant, output=output))
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
