"""The dashboard's governance pages in a real Chromium against the local stack: one
approval's full page (its context, the time left, the decision) and the audit log followed
live, with its chain check.

Each test signs in as a person would, acts through the pages, and checks the outcome on
the API; each saves a screenshot in .cordum/screenshots/ and scans its page with axe.
"""

from __future__ import annotations

import re
import uuid

import pytest

from tests.e2e.browser import (
    WAIT_MS,
    assert_accessible,
    screenshot,
    settled,
    sign_in,
    sign_out,
    submit,
)

pytest.importorskip("playwright.sync_api", reason="playwright is in the dev dependencies")
from playwright.sync_api import expect  # noqa: E402

GATED_TOPIC = "job.echo.approval"
SECTIONS = ("What will run", "Why it is gated", "Blast radius", "Risk", "Prior decisions",
            "Rollback guidance")


def test_an_approval_page_shows_its_whole_context_and_approves(stack, console, page):
    job_id = submit(stack, {
        "topic": GATED_TOPIC, "prompt": f"approval page {uuid.uuid4()}",
        "labels": {"target_system": "e2e-billing", "rollback_hint": "nothing to undo: an echo"},
        # Its deadline counts from the submit: the page counts down to it.
        "deadline_ms": 15 * 60 * 1000,
    })
    status, context = stack.http("GET", f"/api/v1/approvals/{job_id}/context")
    assert status == 200 and context["time_left"]["remaining_ms"] > 0, context

    sign_in(page, console, stack.approver_key, stack.tenant)
    page.goto(f"{console}/approvals/{job_id}")
    settled(page)
    expect(page.get_by_role("heading", level=1)).to_contain_text(job_id)
    for name in SECTIONS:
        expect(page.get_by_role("heading", level=2, name=name, exact=True)).to_be_visible(
            timeout=WAIT_MS)
    expect(page.get_by_role("region", name="What will run")).to_contain_text(GATED_TOPIC)
    expect(page.get_by_role("region", name="Blast radius")).to_contain_text("e2e-billing")
    expect(page.get_by_role("region", name="Rollback guidance")).to_contain_text(
        "nothing to undo")

    # The countdown ticks: what it shows changes within a few seconds.
    timer = page.get_by_role("timer", name="Time left to decide")
    expect(timer).to_be_visible()
    expect(timer).to_contain_text(re.compile(r"1[45] min \d\d s"))
    first = timer.locator("[aria-hidden='true']").first.inner_text()
    expect(timer.locator("[aria-hidden='true']").first).not_to_have_text(first, timeout=5000)

    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_enabled(timeout=WAIT_MS)
    screenshot(page, "approval-page")
    assert_accessible(page)

    page.get_by_label("Reason").fill("read the whole context in the browser")
    approve.click()
    expect(page.get_by_text(f"Approved job {job_id}.")).to_be_visible(timeout=WAIT_MS)
    job = stack.wait_terminal(job_id, 90)
    assert job["state"] == "SUCCEEDED", job
    status, context = stack.http("GET", f"/api/v1/approvals/{job_id}/context")
    assert status == 200 and context["approval"]["approval_status"] == "approved", context
    sign_out(page)


def test_the_audit_log_follows_new_acts_live_and_its_chain_verifies(stack, console, page):
    sign_in(page, console, stack.key, stack.tenant)
    page.goto(f"{console}/audit")
    settled(page)
    # The box reflects the URL (?tail=1), which the click changes through the router:
    # its checked state follows a render later, so the test waits for it rather than
    # asking Playwright's check() to see it change within the click.
    page.get_by_label("Live tail").click()
    expect(page.get_by_label("Live tail")).to_be_checked()
    expect(page.get_by_text("Following new events")).to_be_visible()
    events = page.get_by_role("region", name="Events")

    # Acts over the API, none through the page: a gated submit, then its approval.
    job_id = submit(stack, {"topic": GATED_TOPIC, "prompt": f"audit tail {uuid.uuid4()}"})
    row = events.get_by_role("row").filter(has_text="job.submit.gated").filter(has_text=job_id)
    expect(row).to_have_count(1, timeout=WAIT_MS)
    status, body = stack.http("POST", f"/api/v1/approvals/{job_id}/approve",
                              {"reason": "audit tail e2e"},
                              headers={"X-API-Key": stack.approver_key})
    assert status == 200, body
    approved = events.get_by_role("row").filter(has_text="approval.approve").filter(
        has_text=job_id)
    expect(approved).to_have_count(1, timeout=WAIT_MS)
    assert page.url.endswith("/audit?tail=1"), page.url  # no reload, no navigation

    integrity = page.get_by_role("region", name="Chain integrity")
    expect(integrity).to_contain_text("Chain verified", timeout=WAIT_MS)
    expect(integrity).not_to_contain_text("Compromised")
    screenshot(page, "audit")
    assert_accessible(page)

    # The filter by type prefix narrows the list to the job's events.
    page.get_by_label("Type").fill("job.*")
    page.get_by_label("Job ID").fill(job_id)
    page.get_by_role("button", name="Apply filters").click()
    expect(events.get_by_role("row").filter(has_text="job.submit.gated")).to_have_count(
        1, timeout=WAIT_MS)
    expect(events.get_by_role("row").filter(has_text="approval.approve")).to_have_count(0)
    assert stack.wait_terminal(job_id, 90)["state"] == "SUCCEEDED"
    sign_out(page)
