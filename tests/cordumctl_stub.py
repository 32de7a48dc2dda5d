"""A stub of Cordum's HTTP API for cordumctl's tests, behind ``httpx.MockTransport``.

Routes answer from a table; a route given a list answers its items in turn (the last
one again once they run out), which is how a job or run is made to move between polls.
Every request is recorded, headers included, so tests can check what was sent.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from cordumctl.app import main
from cordumctl.client import RetryPolicy
from cordumctl.session import Runtime

API_URL = "http://api.test/prod"
API_KEY = "sk-test-9f8e7d6c5b4a"
ENV = {"CORDUM_API_URL": API_URL, "CORDUM_API_KEY": API_KEY, "CORDUM_TENANT_ID": "default"}

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


def reply(status: int = 200, body: Any = None, headers: dict[str, str] | None = None
          ) -> httpx.Response:
    if body is None and status == 204:
        return httpx.Response(204, headers=headers)
    return httpx.Response(status, json=body, headers=headers)


def error(status: int, message: str, code: str = "", **extra: Any) -> httpx.Response:
    headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else None
    return reply(status, {"error": message, "code": code, "status": status, **extra}, headers)


@dataclass
class StubApi:
    routes: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, *answers: Answer) -> StubApi:
        self.routes[(method, path)] = list(answers)
        return self

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/prod")
        answers = self.routes.get((request.method, path))
        if not answers:
            return error(404, f"no stub for {request.method} {path}", "not_found")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer(request) if callable(answer) else answer

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests
                if r.method == method and r.url.path.removeprefix("/prod") == path]

    def body(self, method: str, path: str, index: int = -1) -> Any:
        return json.loads(self.sent(method, path)[index].content or b"null")


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    sleeps: list[float]

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(api: StubApi, *args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None, terminal: bool = False,
            retry: RetryPolicy | None = None) -> Outcome:
    """Run cordumctl in-process against ``api``; stdout is a terminal when ``terminal``."""
    out, err = io.StringIO(), io.StringIO()
    sleeps: list[float] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    runtime = Runtime(
        transport=api.transport(), environ=ENV if env is None else env,
        cwd=cwd or Path("/nonexistent-cordumctl-test"), sleep=sleep, clock=lambda: clock[0],
        retry=retry or RetryPolicy(), poll_interval_s=1.0,
        console=Console(file=out, width=200, force_terminal=terminal, color_system=None),
        err_console=Console(file=err, width=200, color_system=None))
    code = main(list(args), runtime)
    return Outcome(code, out.getvalue(), err.getvalue(), sleeps)
