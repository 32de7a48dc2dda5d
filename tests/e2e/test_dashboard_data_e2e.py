"""The dashboard's data pages in a real Chromium against the local stack: a trace's jobs on
one timeline, the tenant's artifacts, the schema and topic registries, and config by scope
with the effective result.

Each test prepares its data over the API under unique names, opens its page, checks what
the page shows, saves a screenshot in .cordum/screenshots/ and scans the page with axe.
"""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from tests.e2e.browser import WAIT_MS, assert_accessible, screenshot, settled, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is in the dev dependencies")
from playwright.sync_api import expect  # noqa: E402

POLICY_LIVE_WITHIN_S = 15.0


def mark() -> str:
    return uuid.uuid4().hex[:10]


def two_jobs_in_one_trace(stack) -> tuple[str, list[str]]:
    """A submit takes no trace id from its caller (the gateway makes one per job); a job
    joins another's trace when it is a remediation of it. So: a rule on a topic unique to
    this test denies the first job and offers a remediation to job.echo; applying it
    submits the second job into the first one's trace. The rule's bundle is removed
    afterwards (only that bundle: nothing else published in the meantime is undone)."""
    platform = stack.env.get("CORDUM_PLATFORM_KEY", "")
    if not platform:
        pytest.fail("CORDUM_PLATFORM_KEY unknown: `make up` writes it")
    as_owner = {"X-API-Key": platform}
    label = mark()
    topic = f"job.e2e.trace{label}"
    bundle_id = f"e2e/trace-{label}"
    path = f"/api/v1/policy/bundles/{bundle_id.replace('/', '~')}"
    content = (f"rules:\n  - id: trace-{label}\n"
               f"    match: {{topics: [{topic}]}}\n"
               f"    decision: deny\n    reason: this topic runs as job.echo\n"
               f"    remediations:\n      - id: to-echo\n"
               f"        title: Run it on job.echo\n"
               f"        replacement_topic: job.echo\n")
    status, body = stack.http("PUT", path, {"content": content, "message": "trace e2e"},
                              headers=as_owner)
    assert status == 200, body
    try:
        status, published = stack.http("POST", "/api/v1/policy/publish",
                                       {"bundle_ids": [bundle_id], "message": "trace e2e"},
                                       headers=as_owner)
        assert status == 200, published
        deadline = time.monotonic() + POLICY_LIVE_WITHIN_S
        while True:
            status, denied = stack.http("POST", "/api/v1/jobs",
                                        {"topic": topic, "prompt": f"trace {label}"})
            if status == 403 or time.monotonic() > deadline:
                break
            # Submitted before the rule was in force: that job is not part of this trace.
            time.sleep(0.25)
        assert status == 403 and denied.get("job_id"), denied
        status, applied = stack.http("POST", f"/api/v1/jobs/{denied['job_id']}/remediate",
                                     {"remediation_id": "to-echo"})
        assert status == 200, applied
        assert applied["trace_id"] == denied["trace_id"], applied
    finally:
        stack.http("DELETE", path, headers=as_owner)
    assert stack.wait_terminal(denied["job_id"])["state"] == "DENIED"
    assert stack.wait_terminal(applied["job_id"])["state"] == "SUCCEEDED"
    return denied["trace_id"], [denied["job_id"], applied["job_id"]]


def test_a_trace_shows_its_jobs_on_one_timeline(stack, console, page):
    trace_id, job_ids = two_jobs_in_one_trace(stack)
    status, trace = stack.http("GET", f"/api/v1/traces/{trace_id}")
    assert status == 200 and {j["id"] for j in trace} == set(job_ids), trace

    sign_in(page, console, stack.key, stack.tenant)
    page.goto(f"{console}/traces/{trace_id}")
    settled(page)
    expect(page.get_by_role("heading", level=1)).to_contain_text(trace_id)
    table = page.get_by_role("table")
    for job_id in job_ids:
        expect(table.get_by_role("link", name=job_id, exact=True)).to_be_visible(timeout=WAIT_MS)
    timeline = page.get_by_role("region", name="Timeline")
    expect(timeline.get_by_role("listitem")).to_have_count(2)
    expect(timeline).to_contain_text("DENIED")
    expect(timeline).to_contain_text("SUCCEEDED")
    screenshot(page, "trace")
    assert_accessible(page)

    # The job's page links to its trace.
    table.get_by_role("link", name=job_ids[1], exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(job_ids[1])
    page.get_by_role("link", name=trace_id, exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(trace_id)


def test_an_artifact_is_listed_and_shown(stack, console, page):
    text = f"artifact for the dashboard {mark()}"
    status, made = stack.http("POST", "/api/v1/artifacts", {
        "content_base64": base64.b64encode(text.encode()).decode(),
        "content_type": "text/plain", "retention": "short", "labels": {"e2e": "dashboard"}})
    assert status == 200, made
    ptr = made["artifact_ptr"]

    sign_in(page, console, stack.key, stack.tenant)
    page.goto(f"{console}/artifacts")
    settled(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Artifacts")
    # Opened by its pointer, its content is shown as text.
    page.get_by_label("Pointer or ID").fill(ptr)
    page.get_by_role("button", name="Open artifact").click()
    content = page.get_by_role("region", name="Artifact content")
    expect(content.locator("pre", has_text=text)).to_be_visible(timeout=WAIT_MS)
    screenshot(page, "artifacts")
    assert_accessible(page)

    status, _ = stack.http("GET", "/api/v1/artifacts?limit=50")
    if status in (404, 405):
        pytest.skip(f"GET /api/v1/artifacts answers {status} on this stack: the artifact list "
                    "route is not deployed, so the listing cannot be checked")
    assert status == 200
    page.reload()
    settled(page)
    listed = page.get_by_role("region", name="Stored artifacts").get_by_role("table")
    expect(listed.get_by_text(ptr, exact=True)).to_be_visible(timeout=WAIT_MS)
    screenshot(page, "artifacts")
    assert_accessible(page)


def test_the_schemas_page_lists_schemas_and_topics(stack, console, page):
    schema_id = f"e2e-dash-{mark()}"
    status, out = stack.http("POST", "/api/v1/schemas", {
        "id": schema_id, "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}})
    assert status == 204, out
    try:
        sign_in(page, console, stack.key, stack.tenant)
        page.goto(f"{console}/schemas")
        settled(page)
        expect(page.get_by_role("heading", level=1)).to_have_text("Schemas")
        schemas = page.get_by_role("region", name="Registered schemas")
        # The list is in id order, 50 a page: the new schema is on the first page only
        # when fewer than 50 ids sort before it.
        status, first = stack.http("GET", "/api/v1/schemas?limit=50")
        assert status == 200, first
        if any(s["id"] == schema_id for s in first["schemas"]):
            expect(schemas.get_by_text(schema_id, exact=True)).to_be_visible(timeout=WAIT_MS)
            schemas.get_by_role("button", name=f"Show schema {schema_id}").click()
            expect(schemas.get_by_text('"integer"')).to_be_visible()
        expect(page.get_by_role("region", name="Topics")).to_be_visible()
        screenshot(page, "schemas")
        assert_accessible(page)
    finally:
        stack.http("DELETE", f"/api/v1/schemas/{schema_id}")


def test_a_team_config_value_shows_in_the_effective_config(stack, console, page):
    team, value = f"e2e-team-{mark()}", f"value-{mark()}"
    status, out = stack.http("PUT", "/api/v1/config", {
        "scope": "team", "scope_id": team, "data": {"e2e_dashboard": value}})
    assert status == 204, out

    sign_in(page, console, stack.key, stack.tenant)
    page.goto(f"{console}/config")
    settled(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Config")
    page.get_by_label("Scope", exact=True).select_option("team")
    page.get_by_label("Scope ID").fill(team)
    page.get_by_role("button", name="Load document").click()
    document = page.get_by_role("region", name=f"Document: team {team}")
    expect(document.locator("pre", has_text=value)).to_be_visible(timeout=WAIT_MS)
    effective = page.get_by_role("region", name="Effective config")
    expect(effective.locator("pre", has_text=value)).to_be_visible(timeout=WAIT_MS)
    expect(effective).to_contain_text("team:1")
    screenshot(page, "config")
    assert_accessible(page)
