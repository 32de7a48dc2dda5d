"""``cordumctl artifacts``: Artifacts: put, get, list; read a memory pointer.

``put`` sends a file (or stdin) of up to 4 MiB inline; a larger file is declared by its
size and uploaded straight to S3 through the presigned PUT the API answers (its
Content-Type and Content-Length are signed, so they are sent as given), with a progress
bar on a terminal. The upload URL carries its own signature: the API key is never sent
to it. ``get`` shows an artifact's metadata, and with ``--out`` writes its content
(downloaded from S3 through the presigned GET when S3 holds it). ``list`` shows the
tenant's artifacts, newest first (``--all`` follows every page). ``memory`` shows what a
``redis://`` pointer holds (a job's context or result, or an artifact).

``--out`` (``-O``) names the file written: ``-o`` is the global ``--output`` format.
"""

from __future__ import annotations

import base64
import mimetypes
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from cordumctl.errors import CliError, ExitCode
from cordumctl.output import Column
from cordumctl.session import Session, session

app = typer.Typer(help="Artifacts: put, get, list; read a memory pointer.",
                  no_args_is_help=True)

ARTIFACTS = "/api/v1/artifacts"
UPLOADS = "/api/v1/artifacts/uploads"
MEMORY = "/api/v1/memory"
INLINE_MAX_BYTES = 4 * 1024 * 1024
"""The API's inline limit: a larger artifact goes up through a presigned URL."""
CHUNK_BYTES = 1024 * 1024
TRANSFER_TIMEOUT_S = 300.0
"""Read/write timeout of one upload or download chunk (not of the whole transfer)."""
RETENTIONS = ("short", "standard", "audit")

ARTIFACT_FIELDS = [
    Column("ARTIFACT", "artifact_ptr"), Column("SIZE", "size_bytes"),
    Column("CONTENT TYPE", "content_type"), Column("STORAGE", "storage"),
    Column("RETENTION", "retention"), Column("EXPIRES", "expires_at"),
]
DETAIL_FIELDS = [
    Column("ARTIFACT", "artifact_ptr"), Column("SIZE", "metadata.size_bytes"),
    Column("CONTENT TYPE", "metadata.content_type"), Column("STORAGE", "metadata.storage"),
    Column("RETENTION", "metadata.retention"), Column("CREATED", "metadata.created_at"),
    Column("LABELS", lambda d: ", ".join(f"{k}={v}" for k, v in
                                         sorted(((d.get("metadata") or {}).get("labels")
                                                 or {}).items())) or "-"),
    Column("DOWNLOAD", "download_url"),
]
LIST_COLUMNS = [
    Column("ARTIFACT", "artifact_ptr"), Column("SIZE", "size_bytes"),
    Column("CONTENT TYPE", "content_type"), Column("STORAGE", "storage"),
    Column("RETENTION", "retention"), Column("CREATED", "created_at"),
    Column("EXPIRES", "expires_at"),
]
MEMORY_FIELDS = [
    Column("POINTER", "pointer"), Column("KIND", "kind"), Column("SIZE", "size_bytes"),
    Column("CONTENT TYPE", "content_type"), Column("REDACTED", "redacted"),
    Column("DOWNLOAD", "download_url"),
]


def _labels(pairs: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--label {pair!r}: want NAME=VALUE", ExitCode.USAGE)
        labels[name.strip()] = value
    return labels


def _progress(s: Session, label: str, total: int) -> Progress:
    return Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), console=s.err, transient=True,
                    disable=not s.err.is_terminal or total < CHUNK_BYTES)


def _transfer_client(s: Session) -> httpx.Client:
    """A client for presigned URLs: no API key, no base URL (the URL is S3's)."""
    return httpx.Client(transport=s.runtime.transport,
                        timeout=httpx.Timeout(TRANSFER_TIMEOUT_S, connect=10.0))


def _chunks(stream: IO[bytes], progress: Progress, task: Any) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_BYTES):
        progress.update(task, advance=len(chunk))
        yield chunk


def _refused(what: str, response: httpx.Response) -> CliError:
    detail = " ".join(response.text.split())[:200]
    return CliError(f"{what} failed: S3 answered {response.status_code} {detail}".rstrip())


def _upload(s: Session, source: IO[bytes], size: int, target: dict[str, Any]) -> None:
    headers = dict(target.get("headers") or {})
    with _progress(s, "uploading", size) as progress, _transfer_client(s) as http:
        task = progress.add_task("uploading", total=size)
        response = http.request(str(target.get("method") or "PUT"), str(target["url"]),
                                headers=headers, content=_chunks(source, progress, task))
    if response.status_code >= 300:
        raise _refused("upload", response)


@app.command()
def put(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(metavar="FILE|-", help="The file, - for stdin.")],
    content_type: Annotated[str | None, typer.Option(
        "--content-type", metavar="TYPE",
        help="MIME type (default: guessed from the name, else application/octet-stream).")
    ] = None,
    retention: Annotated[str, typer.Option(
        metavar="CLASS", help="short (1 day), standard (7 days) or audit (30 days).")
    ] = "standard",
    label: Annotated[list[str] | None, typer.Option(
        "--label", "-l", metavar="NAME=VALUE", help="A label (repeatable).")] = None,
) -> None:
    """Store FILE as an artifact: inline up to 4 MiB, else uploaded to S3."""
    s = session(ctx)
    if retention.lower() not in RETENTIONS:
        raise CliError(f"--retention: want one of {', '.join(RETENTIONS)}", ExitCode.USAGE)
    kind = content_type or (mimetypes.guess_type(file)[0] if file != "-" else None)
    fields = {"content_type": kind or "application/octet-stream",
              "retention": retention.lower(), "labels": _labels(label)}
    if file == "-":
        data = sys.stdin.buffer.read()
        size, opener = len(data), None
    else:
        path = Path(file)
        if not path.is_file():
            raise CliError(f"{file}: no such file", ExitCode.USAGE)
        size, opener, data = path.stat().st_size, path, b""
    if size == 0:
        raise CliError(f"{file}: empty: an artifact holds at least one byte", ExitCode.USAGE)
    if size <= INLINE_MAX_BYTES:
        if opener is not None:
            data = opener.read_bytes()
        made = s.client.post(ARTIFACTS, {"content_base64": base64.b64encode(data).decode(),
                                         **fields}) or {}
    else:
        made = s.client.post(UPLOADS, {"size_bytes": size, **fields}) or {}
        target = made.get("upload") or {}
        if not target.get("url"):
            raise CliError("the API answered no upload URL")
        if opener is not None:
            with opener.open("rb") as source:
                _upload(s, source, size, target)
        else:
            import io

            _upload(s, io.BytesIO(data), size, target)
        made = {k: v for k, v in made.items() if k != "upload"}
    s.printer.record(made, ARTIFACT_FIELDS)


def _path(ptr: str) -> str:
    """The artifact's path: its pointer percent-encoded (one path segment)."""
    return f"{ARTIFACTS}/{quote(ptr.strip(), safe='')}"


def _write(s: Session, out: str, chunks: Iterator[bytes]) -> int:
    written = 0
    if out == "-":
        target = getattr(s.console.file, "buffer", None)
        for chunk in chunks:
            written += len(chunk)
            if target is not None:
                target.write(chunk)
            else:
                s.console.file.write(chunk.decode("utf-8", "replace"))
        return written
    with open(out, "wb") as handle:
        for chunk in chunks:
            written += len(chunk)
            handle.write(chunk)
    return written


def _download(s: Session, url: str, size: int, out: str) -> int:
    with _progress(s, "downloading", size) as progress, _transfer_client(s) as http, \
            http.stream("GET", url) as response:
        if response.status_code >= 300:
            response.read()
            raise _refused("download", response)
        task = progress.add_task("downloading", total=size or None)

        def chunks() -> Iterator[bytes]:
            for chunk in response.iter_bytes(CHUNK_BYTES):
                progress.update(task, advance=len(chunk))
                yield chunk

        return _write(s, out, chunks())


@app.command()
def get(
    ctx: typer.Context,
    ptr: Annotated[str, typer.Argument(metavar="PTR", help="redis://art:<id>, or its id.")],
    out: Annotated[str | None, typer.Option(
        "--out", "-O", metavar="FILE", help="Write the content to FILE (- for stdout).")
    ] = None,
) -> None:
    """An artifact's metadata; with --out, its content too."""
    s = session(ctx)
    detail = s.client.get(_path(ptr)) or {}
    if out is None:
        s.printer.record(detail, DETAIL_FIELDS)
        return
    if detail.get("content_base64") is not None:
        data = base64.b64decode(detail["content_base64"])
        written = _write(s, out, iter([data]))
    elif detail.get("download_url"):
        size = int((detail.get("metadata") or {}).get("size_bytes") or 0)
        written = _download(s, str(detail["download_url"]), size, out)
    else:
        raise CliError("the API answered neither content nor a download URL")
    if out != "-":
        s.err.print(f"wrote {written} bytes to {out}", highlight=False, markup=False)


@app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="Artifacts per page (at most 200).")] = 50,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """The tenant's artifacts, newest first (metadata only)."""
    s = session(ctx)
    items = list(s.client.pages(ARTIFACTS, {"limit": limit}, follow=all_))
    s.printer.rows(items, LIST_COLUMNS, empty="no artifacts")


@app.command()
def memory(
    ctx: typer.Context,
    ptr: Annotated[str, typer.Argument(
        metavar="PTR", help="redis://ctx:<job>, redis://res:<job>, redis://art:<id> (or the "
                            "key without redis://).")],
) -> None:
    """What a redis:// pointer holds: a job's context or result, or an artifact."""
    s = session(ctx)
    param = "ptr" if ptr.strip().startswith("redis://") else "key"
    found = s.client.get(MEMORY, {param: ptr.strip()}) or {}

    def body() -> None:
        shown = found.get("text")
        if isinstance(shown, str):
            s.console.print(shown, highlight=False, markup=False)
        elif found.get("base64"):
            s.console.print(f"({found.get('size_bytes')} bytes, not text: --output json "
                            "shows them in base64)", highlight=False, markup=False)

    s.printer.record(found, MEMORY_FIELDS, extra=body)
