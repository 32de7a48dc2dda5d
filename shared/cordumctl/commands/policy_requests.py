"""What ``cordumctl policy`` builds its commands on (cordumctl.commands.policy): the
access each call needs and how a refusal reads, bundle ids and files, and the replay's
paging across ``next_cursor``."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import typer

from cordumctl.arguments import labels, seconds
from cordumctl.errors import ApiError, CliError, ExitCode
from cordumctl.output import parse_time, shown, text

if TYPE_CHECKING:
    from cordumctl.session import Session

BUNDLES = "/api/v1/policy/bundles"
DEFAULT_BUNDLE_PREFIX = "secops/"
MAX_REPLAY_PAGES = 100
DECISION_PREFIX = "DECISION_TYPE_"
DOCS = "docs/policy.md"



class Access(StrEnum):
    """What a call does with the policy, for the words of a 403."""

    READ = "read"
    ASK = "ask"
    CHANGE = "change"


_NEEDS = {
    Access.READ: "reads take role admin, policy.read or policy.write",
    Access.ASK: "simulate, explain and replay take role admin or policy.write",
    Access.CHANGE: "a change takes an admin or policy.write key whose tenant is *, as the "
                   "policy governs every tenant",
}
_LINE = re.compile(r"\bline (\d+)")
_RULE = re.compile(r"\brule (['\"])(.*?)\1")


def remedy(found: Any) -> str:
    if not isinstance(found, dict):
        return text(found)
    topic = found.get("replacementTopic") or found.get("replacement_topic")
    return text(found.get("title") or (f"use {topic}" if topic else found.get("id")))


def short_decision(value: Any) -> str:
    """``DECISION_TYPE_DENY`` as ``DENY``."""
    return str(value or "").removeprefix(DECISION_PREFIX)


def bundle_path(bundle_id: str, *tail: str) -> str:
    """The bundle's URL path: ``/`` sent as ``~``, anything else unusual escaped."""
    return "/".join((BUNDLES, quote(bundle_id.replace("/", "~"), safe="~:@"), *tail))



@dataclass(frozen=True)
class BundleFile:
    """A bundle's YAML as written in a file (or stdin): sent as it is, so the line the API
    names in an error is the file's line."""

    name: str
    """The path given, or ``<stdin>``."""
    content: str

    @classmethod
    def read(cls, path: str) -> BundleFile:
        if path == "-":
            return cls("<stdin>", sys.stdin.read())
        file = Path(path)
        if not file.is_file():
            raise typer.BadParameter(f"no such file: {path}", param_hint="--file")
        try:
            return cls(path, file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--file") from None

    def line(self, number: int) -> str | None:
        lines = self.content.splitlines()
        return lines[number - 1] if 0 < number <= len(lines) else None


def bundle_id_for(given: str | None, file: str | None, option: str) -> str:
    """``given``, else the file's name without its extension under ``secops/``."""
    if given:
        return given
    if file is None or file == "-":
        raise typer.BadParameter("name the bundle (a file read from stdin has no name)",
                                 param_hint=option)
    return DEFAULT_BUNDLE_PREFIX + Path(file).stem


def explained(exc: ApiError, access: Access, source: BundleFile | None = None) -> CliError:
    """``exc`` with what it means here: for a 403, what key the call takes; for a bundle
    that does not validate, where in the file (the line as written) and which rule."""
    lines = [exc.line()]
    if exc.status == 403:
        lines.append(f"  this key may not {access.value} the policy: {_NEEDS[access]} "
                     f"(see {DOCS})")
    elif exc.status in (400, 422):
        found, rule = _LINE.search(exc.error), _RULE.search(exc.error)
        number = int(found.group(1)) if found else None
        at = [] if number is None else [f"{source.name}:{number}" if source else
                                        f"line {number}"]
        at += [] if rule is None else [f"rule {rule.group(2)}"]
        if at:
            lines.append("  at " + ", ".join(at))
        written = source.line(number) if source and number else None
        if written is not None:
            lines.append(f"  {number:>5} | {written}")
    return CliError("\n".join(lines), exc.exit_code)


@contextmanager
def asking(access: Access, source: BundleFile | None = None) -> Iterator[None]:
    """Calls whose 400, 403 and 422 are worded by :func:`explained`."""
    try:
        yield
    except ApiError as exc:
        if exc.status in (400, 403, 422):
            raise explained(exc, access, source) from None
        raise


def confirm(question: str) -> None:
    """Go on only when the person at the terminal says yes; with no terminal, never."""
    if not sys.stdin.isatty():
        raise CliError(f"{question}: stdin is not a terminal to ask; give --yes",
                       ExitCode.USAGE)
    if not typer.confirm(question, err=True):
        raise typer.Abort()


# -- bundles ----------------------------------------------------------------------------


def instant(value: str, now: datetime, option: str) -> str:
    """An RFC 3339 time, or a duration (``24h``, ``90m``) before ``now``, as RFC 3339 UTC."""
    when = parse_time(value)
    if when is None:
        try:
            when = now - timedelta(seconds=seconds(value))
        except typer.BadParameter:
            raise typer.BadParameter(f"{value!r} is neither an RFC 3339 time nor a duration "
                                     "ago (24h, 90m)", param_hint=option) from None
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_MERGED = frozenset({"summary", "rule_hits", "changes", "errors", "warnings", "next_cursor"})
"""Fields of a replay page gathered over the pages; the others are the last page's."""


def _summed(total: dict[str, Any], page: dict[str, Any]) -> dict[str, Any]:
    """The counts of two pages' summaries added; anything else as the later page has it."""
    out = dict(total)
    for name, value in page.items():
        earlier = out.get(name)
        both_counts = all(isinstance(v, int) and not isinstance(v, bool)
                          for v in (earlier, value))
        out[name] = earlier + value if both_counts else value  # type: ignore[operator]
    return out


def _hits(total: list[dict[str, Any]], page: list[Any]) -> list[dict[str, Any]]:
    """Rule hits of two pages, the counts of one rule and decision added."""
    merged = {(h.get("rule_id"), h.get("decision")): dict(h) for h in total}
    for hit in (h for h in page if isinstance(h, dict)):
        key = (hit.get("rule_id"), hit.get("decision"))
        if key in merged:
            merged[key]["count"] = int(merged[key].get("count") or 0) + int(hit.get("count") or 0)
        else:
            merged[key] = dict(hit)
    return sorted(merged.values(), key=lambda h: (-int(h.get("count") or 0),
                                                  str(h.get("rule_id")), str(h.get("decision"))))


def replay_pages(s: Session, body: dict[str, Any], source: BundleFile | None
                 ) -> dict[str, Any]:
    """Every page of a replay (``next_cursor`` sent back as ``cursor``) as one answer:
    the changes, errors and warnings of all pages, their summaries' counts and rule hits
    added (each page counts its own jobs); the other fields as the last page has them."""
    request = dict(body)
    doc: dict[str, Any] = {"summary": {}, "rule_hits": [], "changes": [], "warnings": []}
    seen: set[str] = set()
    for _ in range(MAX_REPLAY_PAGES):
        with asking(Access.ASK, source):
            page = s.client.post("/api/v1/policy/replay", request) or {}
        cursor = page.get("next_cursor")
        follow = bool(cursor) and str(cursor) not in seen
        doc.update({k: v for k, v in page.items() if k not in _MERGED})
        doc["summary"] = _summed(doc["summary"], page.get("summary") or {})
        doc["rule_hits"] = _hits(doc["rule_hits"], page.get("rule_hits") or [])
        doc["changes"] += page.get("changes") or []
        if page.get("errors"):
            doc["errors"] = [*doc.get("errors", []), *page["errors"]]
        for warning in page.get("warnings") or []:
            # "continue with next_cursor" is done here; any other warning is said once.
            if warning not in doc["warnings"] and not (follow and "next_cursor" in warning):
                doc["warnings"].append(warning)
        doc["next_cursor"] = cursor if follow else None
        if not follow:
            break
        seen.add(str(cursor))
        request["cursor"] = cursor
    else:
        s.err.print(shown(f"stopped after {MAX_REPLAY_PAGES} pages; next_cursor is in the "
                          "JSON answer", "yellow"), highlight=False)
    return doc


def question(topic: str, label: list[str] | None, capability: str | None,
             risk_tag: list[str] | None, job_id: str | None) -> dict[str, Any]:
    """The job to ask about, in Cordum's request shape (``meta`` carries the capability
    and the risk tags)."""
    body: dict[str, Any] = {"topic": topic}
    if label:
        body["labels"] = labels(label)
    if job_id:
        body["job_id"] = job_id
    meta: dict[str, Any] = {}
    if capability:
        meta["capability"] = capability
    if risk_tag:
        meta["risk_tags"] = list(risk_tag)
    if meta:
        body["meta"] = meta
    return body


def noted(body: dict[str, Any], message: str | None, note: str | None) -> dict[str, Any]:
    return {**body, **({"message": message} if message else {}),
            **({"note": note} if note else {})}


def snapshot_lines(answer: dict[str, Any]) -> list[str]:
    before, after = answer.get("snapshot_before"), answer.get("snapshot_after")
    lines = [f"snapshot after:  {text(after)}"]
    if before:
        lines.insert(0, f"snapshot before: {before}  (undo: cordumctl policy rollback {before})")
    return lines


def waiting_line(answer: Any) -> str | None:
    """What to say about a change kept as a proposal (202, two people configured); None
    when the change was made."""
    proposal = answer.get("proposal") if isinstance(answer, dict) else None
    if not isinstance(proposal, dict):
        return None
    pid = proposal.get("id", "")
    return (f"proposed {pid}: not in force until another identity confirms it\n"
            f"  confirm: cordumctl policy proposals confirm {pid}  (by someone else)\n"
            f"  expires: {text(proposal.get('expires_at'))}")
