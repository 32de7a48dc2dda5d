"""The policy pages in a real Chromium against the local stack: a draft bundle written,
simulated and published from the pages denies its jobs at submit, and a rollback from
the publish history takes the deny out of force again.

Signs in with the platform key (tenant ``*``: the only key that may change the policy)
acting for tenant "default". The bundle denies ``job.echo`` jobs carrying a label unique to
this test (the shipped policy allows job.echo, so the rollback shows the submit accepted
again), and the test rolls back and deletes what it wrote whatever happens, since other
tests share the stack.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.browser import WAIT_MS, assert_accessible, go, screenshot, settled, sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("playwright.sync_api", reason="playwright is in the dev dependencies")
from playwright.sync_api import expect  # noqa: E402

LIVE_WITHIN_S = 30.0
"""How long the kernel may take to have a change in force (docs/policy.md: within 5 s)."""


TOPIC = "job.echo"


def submit_topic(stack: Any, mark: str) -> tuple[int, Any]:
    return stack.http("POST", "/api/v1/jobs", {"topic": TOPIC, "prompt": "policy page e2e",
                                               "labels": {"e2e-mark": mark}},
                      headers={"X-API-Key": stack.key})


def denied_by(status: int, body: Any, reason: str) -> bool:
    """Whether a submit was refused by the rule whose reason is ``reason``."""
    return status == 403 and reason in str(body)


def wait_submit(stack: Any, mark: str, reason: str, want_denied: bool) -> tuple[int, Any]:
    """The first submit of the test's jobs that is (or is no longer) denied by its rule."""
    deadline = time.monotonic() + LIVE_WITHIN_S
    while True:
        status, body = submit_topic(stack, mark)
        if denied_by(status, body, reason) == want_denied or time.monotonic() > deadline:
            return status, body
        time.sleep(0.5)


def test_a_bundle_drafted_and_published_in_the_pages_denies_and_a_rollback_undoes_it(
        stack, console, page: Page):
    platform = stack.env.get("CORDUM_PLATFORM_KEY", "")
    if not platform:
        pytest.fail("CORDUM_PLATFORM_KEY unknown: `make up` writes it")
    owner = {"X-API-Key": platform}
    mark = uuid.uuid4().hex[:8]
    bundle_id = f"e2e-ui-{mark}"
    rule_id = f"e2e-ui-deny-{mark}"
    reason = f"denied by the policy page e2e bundle {mark}"
    content = (f"rules:\n  - id: {rule_id}\n"
               f"    match: {{topics: [{TOPIC}], labels: {{e2e-mark: '{mark}'}}}}\n"
               f"    decision: deny\n    reason: {reason}\n")
    snapshot_before = ""
    rolled_back = False

    # Before the bundle the shipped policy accepts the jobs.
    status_without, body_without = submit_topic(stack, mark)
    assert status_without == 200, body_without
    try:
        sign_in(page, console, platform, "default")
        go(page, "Policy")
        settled(page)

        # A new draft from the policy page opens its editor.
        page.get_by_label("Bundle id").fill(bundle_id)
        page.get_by_label("Draft YAML").fill(content)
        page.get_by_role("button", name="Create draft").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Bundle {bundle_id}",
                                                                   timeout=WAIT_MS)
        settled(page)
        editor = page.get_by_label("Bundle YAML")
        expect(editor).to_have_value(content, timeout=WAIT_MS)
        status, stored = stack.http("GET", f"/api/v1/policy/bundles/{bundle_id}", headers=owner)
        assert status == 200 and stored["enabled"] is False, stored

        # A mistake is refused and shown at its line; nothing is stored.
        broken = content.replace("decision: deny", "decision: forbid")
        editor.fill(broken)
        page.get_by_role("button", name="Save draft").click()
        go_to = page.get_by_role("button", name=re.compile(r"^Go to line \d+$"))
        expect(go_to).to_be_visible(timeout=WAIT_MS)
        expect(editor).to_have_attribute("aria-invalid", "true")
        expect(page.get_by_role("table", name=re.compile("1 line added, 1 line removed"))) \
            .to_be_visible()
        go_to.click()
        expect(editor).to_be_focused()
        selected = editor.evaluate("el => el.value.slice(el.selectionStart, el.selectionEnd)")
        assert "decision" in selected or rule_id in selected, selected
        screenshot(page, "policy-editor")
        assert_accessible(page)
        editor.fill(content)
        expect(page.get_by_text(re.compile("^No changes: the editor holds"))).to_be_visible()

        # Simulate the test's jobs with the editor's text: DENY by the bundle's rule.
        page.get_by_label("Topic").fill(TOPIC)
        page.get_by_label(re.compile("^Labels")).fill(json.dumps({"e2e-mark": mark}))
        page.get_by_role("button", name="Simulate").click()
        decision = page.get_by_label("Simulated decision")
        expect(decision).to_contain_text("DENY", timeout=WAIT_MS)
        expect(decision).to_contain_text(rule_id)
        expect(decision).to_contain_text(reason)

        # Publish from the page; the notice names the snapshot taken before.
        page.get_by_label(re.compile("^Message")).fill(f"e2e ui {mark}")
        page.get_by_role("button", name="Publish", exact=True).click()
        page.get_by_role("alertdialog").get_by_role("button", name="Yes, publish").click()
        notice = page.get_by_text(re.compile(f"^Published {re.escape(bundle_id)}\\."))
        expect(notice).to_be_visible(timeout=WAIT_MS)
        found = re.search(r"Snapshot before: (\S+)\. Snapshot after", notice.inner_text())
        assert found and not found.group(1).startswith("none"), notice.inner_text()
        snapshot_before = found.group(1)

        # The kernel has it in force: a submit of the jobs is refused by the bundle's rule.
        status, body = wait_submit(stack, mark, reason, want_denied=True)
        assert status == 403 and reason in str(body), (status, body)

        # Roll back from the publish history to the snapshot before the publish.
        page.get_by_role("link", name="All bundles").click()
        settled(page)
        row = page.get_by_role("row").filter(
            has=page.get_by_role("rowheader", name=snapshot_before, exact=True))
        expect(row).to_have_count(1, timeout=WAIT_MS)
        row.get_by_role("button", name="Roll back to this snapshot").click()
        page.get_by_role("alertdialog").get_by_role("button", name="Yes, roll back").click()
        expect(page.get_by_text(f"Rolled back to snapshot {snapshot_before}.", exact=False)) \
            .to_be_visible(timeout=WAIT_MS)
        rolled_back = True
        bundle_link = page.get_by_role("link", name=bundle_id, exact=True)
        expect(bundle_link).to_be_visible(timeout=WAIT_MS)
        expect(page.get_by_role("row").filter(has=bundle_link)).to_contain_text("draft")
        expect(page.get_by_role("cell", name="rollback").first).to_be_visible(timeout=WAIT_MS)
        screenshot(page, "policy")
        assert_accessible(page)

        # Out of force again: the jobs are accepted as before the bundle.
        status, body = wait_submit(stack, mark, reason, want_denied=False)
        assert status == 200, (status, body)
    finally:
        if snapshot_before and not rolled_back:
            stack.http("POST", "/api/v1/policy/rollback",
                       {"snapshot_id": snapshot_before, "message": "e2e cleanup"},
                       headers=owner)
        stack.http("DELETE", f"/api/v1/policy/bundles/{bundle_id}", headers=owner)
