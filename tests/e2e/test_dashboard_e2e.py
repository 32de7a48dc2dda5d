"""The dashboard in a real Chromium against the local stack, through the local console's one
origin (CORDUM_CONSOLE_URL: the built app, /api/* to the REST API, the stream paths to the
stream service, as CloudFront routes them on AWS).

Each test signs in as a person would, acts through the pages only, and checks the outcome
on the API; each saves a screenshot in .cordum/screenshots/ and scans its pages with axe.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING

import pytest

from tests.e2e.browser import (
    WAIT_MS,
    assert_accessible,
    go,
    live,
    screenshot,
    settled,
    sign_in,
    sign_out,
    submit,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("playwright.sync_api", reason="playwright is in the dev dependencies")
from playwright.sync_api import expect  # noqa: E402

GATED_TOPIC = "job.echo.approval"
PAGES = ("/", "/jobs", "/approvals", "/workflows", "/runs", "/dlq", "/workers")


def test_a_job_submitted_over_the_api_appears_live_and_succeeds(stack, console, page):
    sign_in(page, console, stack.key, stack.tenant)
    go(page, "Jobs")
    live(page)
    job_id = submit(stack, {"topic": "job.echo", "prompt": f"dashboard {uuid.uuid4()}"})
    # No reload: the list learns of the job from the event stream.
    row_link = page.get_by_role("link", name=job_id, exact=True)
    expect(row_link).to_be_visible(timeout=WAIT_MS)
    row_link.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(job_id)
    expect(page.get_by_text("SUCCEEDED").first).to_be_visible(timeout=WAIT_MS)
    assert stack.wait_terminal(job_id)["state"] == "SUCCEEDED"
    screenshot(page, "job-detail")
    sign_out(page)


def approval_card(page: Page, job_id: str):
    return page.get_by_role("article").filter(has_text=job_id)


def test_a_gated_job_is_approved_by_another_identity_and_succeeds(stack, console, page):
    job_id = submit(stack, {"topic": GATED_TOPIC, "prompt": f"gated {uuid.uuid4()}"})
    sign_in(page, console, stack.key, stack.tenant)
    go(page, "Approvals")
    card = approval_card(page, job_id)
    expect(card).to_be_visible(timeout=WAIT_MS)
    # The submitter sees why they cannot decide before trying.
    expect(card.get_by_role("button", name="Approve")).to_be_disabled()
    expect(card).to_contain_text("submitted")
    screenshot(page, "approvals-own-job")
    sign_out(page)

    sign_in(page, console, stack.approver_key, stack.tenant)
    go(page, "Approvals")
    card = approval_card(page, job_id)
    expect(card).to_be_visible(timeout=WAIT_MS)
    card.get_by_label("Reason").fill("checked in the browser")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0, timeout=WAIT_MS)
    job = stack.wait_terminal(job_id, 90)
    assert job["state"] == "SUCCEEDED", job
    sign_out(page)


WORKFLOW = {
    "name": "dashboard: a gate, then an echo",
    "input_schema": {"type": "object", "required": ["amount"],
                     "properties": {"amount": {"type": "integer"}}},
    "steps": {
        "gate": {"type": "approval", "input": {"amount": "${input.amount}"}},
        "echo": {"type": "worker", "topic": "job.echo", "depends_on": ["gate"],
                 "input": {"prompt": "after the gate ${input.amount}"}},
    },
}


def step_node(page: Page, step: str):
    return page.get_by_test_id(f"step-{step}")


def test_a_run_waits_at_its_gate_and_its_graph_moves_on_after_approval(stack, console, page):
    status, created = stack.http("POST", "/api/v1/workflows", WORKFLOW)
    assert status in (200, 201), created
    workflow_id = created["id"]
    try:
        sign_in(page, console, stack.key, stack.tenant)
        # Started from the form the definition's input_schema builds.
        page.goto(f"{console}/workflows/{workflow_id}")
        page.get_by_label(re.compile("^amount")).fill("250")
        page.get_by_role("button", name=re.compile("Start run")).click()
        page.wait_for_url(re.compile(r"/runs/[^/]+$"), timeout=WAIT_MS)
        run_id = page.url.rsplit("/", 1)[1]
        gate = step_node(page, "gate")
        expect(gate).to_have_attribute("data-status", re.compile("waiting|running"),
                                       timeout=WAIT_MS)
        expect(gate).to_contain_text("Waiting for approval")
        expect(page.get_by_role("heading", name="Waiting for approval")).to_be_visible()
        screenshot(page, "run-at-gate")

        gate_job = pending_gate(stack, run_id)
        status, out = stack.http("POST", f"/api/v1/approvals/{gate_job}/approve",
                                 {"reason": "fine"}, headers={"X-API-Key": stack.approver_key})
        assert status == 200, out
        # The open page follows the run: no reload.
        expect(gate).to_have_attribute("data-status", "succeeded", timeout=WAIT_MS)
        expect(step_node(page, "echo")).to_have_attribute("data-status", "succeeded",
                                                          timeout=WAIT_MS)
        screenshot(page, "run-succeeded")
    finally:
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")


def pending_gate(stack, run_id: str) -> str:
    """The approval of the run's gate job. A run waits from the moment it sends the step's
    job; the job is gated one hop later (bridge, queue, submit function), and other tests'
    gates may be pending meanwhile, so wait for this run's own."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, listed = stack.http("GET", "/api/v1/approvals?limit=200")
        assert status == 200, listed
        for item in listed["items"]:
            if item.get("workflow") and item["job"]["id"].startswith(run_id):
                return item["job"]["id"]
        time.sleep(0.5)
    pytest.fail(f"no gate of run {run_id} waiting")


def test_a_dlq_entry_is_retried(stack, console, page):
    job_id = submit(stack, {"topic": "job.echo", "prompt": "fail once",
                            "labels": {"echo.fail": "true"}})
    assert stack.wait_terminal(job_id)["state"] == "FAILED"
    sign_in(page, console, stack.key, stack.tenant)
    go(page, "DLQ")
    entry = page.get_by_role("row").filter(has_text=job_id)
    expect(entry).to_be_visible(timeout=WAIT_MS)
    entry.get_by_role("button", name="Retry").click()
    expect(entry).to_have_count(0, timeout=WAIT_MS)
    screenshot(page, "dlq")
    # The retry is a new job of its own, as the API's retry makes it.
    status, listed = stack.http("GET", "/api/v1/jobs?limit=100")
    assert status == 200, listed
    items = listed["items"] if isinstance(listed, dict) else listed
    assert any(str(j.get("id", "")).startswith(f"{job_id}-retry-") for j in items), items


@pytest.mark.parametrize("path", PAGES)
def test_each_page_has_no_serious_accessibility_violation(stack, console, page, path):
    sign_in(page, console, stack.key, stack.tenant)
    page.goto(console + path)
    # Scanned once the page's data is in (the live stream keeps the network busy).
    settled(page)
    name = "overview" if path == "/" else path.strip("/")
    screenshot(page, f"page-{name}")
    assert_accessible(page)


def test_the_sign_in_page_has_no_serious_accessibility_violation(console, page):
    page.goto(console + "/")
    expect(page.get_by_label("API key")).to_be_visible()
    screenshot(page, "sign-in")
    assert_accessible(page)
