"""A real Chromium for the dashboard's browser tests: Debian's /usr/bin/chromium driven by
Playwright (``executable_path``; nothing downloads a browser), one screenshot per test in
.cordum/screenshots/, and an axe scan (axe-core from the dashboard's own node_modules).
"""

from __future__ import annotations

import json
import os
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
