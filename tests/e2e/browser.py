"""A real Chromium for the dashboard's browser tests: Debian's /usr/bin/chromium driven by
Playwright (``executable_path``; nothing downloads a browser), one screenshot per test in
.cordum/screenshots/, and an axe scan (axe-core from the dashboard's own node_modules).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".cordum" / "screenshots"
AXE = ROOT / "dashboard" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_ARGS = [
    # As root in a container: no sandbox. The machine's network is closed: no background
    # requests, no QUIC, no component updates.
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
BLOCKING_IMPACTS = ("serious", "critical")
WAIT_MS = 60_000
"""How long a page may take to show what a test waits for (the stack is on one machine)."""


def chromium_path() -> str:
    found = os.environ.get("CORDUM_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    if not found:
        pytest.fail("no chromium: `apt-get install chromium` (make e2e installs it)")
    return found


def launch(playwright: Any) -> Browser:
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                      args=CHROMIUM_ARGS)


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands."""
    if not AXE.exists():
        pytest.fail(f"{AXE} missing: build the dashboard (make dashboard)")
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Through the protocol, not a <script> tag: the page's CSP allows its own scripts only.
        page.evaluate(AXE.read_text())
    result = page.evaluate(
        "async () => (await window.axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))")
    return [v for v in result if v.get("impact") in BLOCKING_IMPACTS]


def assert_accessible(page: Page) -> None:
    bad = axe_violations(page)
    assert not bad, json.dumps(bad, indent=1)


def sign_in(page: Page, console: str, key: str, tenant: str) -> None:
    """Signs in through the sign-in page, as a person would, and checks where the key is
    kept: the tab's session storage only, never a URL or local storage."""
    from playwright.sync_api import expect

    page.goto(console + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_label("Tenant").fill(tenant)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible(timeout=WAIT_MS)
    assert key not in page.url
    assert page.evaluate("() => JSON.stringify(window.localStorage)").find(key) == -1
    assert key in page.evaluate("() => JSON.stringify(window.sessionStorage)")


def sign_out(page: Page) -> None:
    from playwright.sync_api import expect

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    assert page.evaluate("() => window.sessionStorage.length") == 0


def go(page: Page, name: str) -> None:
    """Follows the main navigation's link ``name``."""
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name,
                                                            exact=True).click()


def live(page: Page) -> None:
    """Waits until the header's badge says the event stream is live."""
    from playwright.sync_api import expect

    expect(page.get_by_role("status", name="Live updates")).to_have_text(
        re.compile("Live"), timeout=WAIT_MS)


def settled(page: Page) -> None:
    """Waits until the page's heading is shown and nothing says Loading."""
    from playwright.sync_api import expect

    expect(page.get_by_role("heading", level=1)).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text(re.compile("^Loading"))).to_have_count(0, timeout=WAIT_MS)


def submit(stack: Any, body: dict[str, Any], key: str | None = None) -> str:
    """Submits a job over the API (as ``key``, else the stack's admin) and answers its id."""
    status, out = stack.http("POST", "/api/v1/jobs", body,
                             headers={"X-API-Key": key} if key else None)
    assert status == 200, out
    return out["job_id"]
