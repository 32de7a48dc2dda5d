"""The policy replay and analytics pages in a real Chromium against the local stack.

Replay: a draft bundle (stored, never published) that denies a few jobs that already ran
is replayed over a window covering them; the page counts them among the decisions that
change and links each to its job. Analytics: the page's figures for the last hour are
what the API answers for the same window.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.browser import WAIT_MS, assert_accessible, screenshot, settled, sign_in, submit

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("playwright.sync_api", reason="playwright is in the dev dependencies")
from playwright.sync_api import expect  # noqa: E402

JOBS = 3
LOCAL_INPUT = """(ms) => {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  const day = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  return `${day}T${p(d.getHours())}:${p(d.getMinutes())}`;
}"""


def local_input(page: Page, epoch_s: float) -> str:
    """A time as the page's datetime-local inputs take it (the browser's time zone)."""
    return page.evaluate(LOCAL_INPUT, int(epoch_s * 1000))


def deny_bundle(rule_id: str, mark: str) -> str:
    return (f"rules:\n  - id: {rule_id}\n"
            f"    match: {{topics: [job.echo], labels: {{e2e-replay: '{mark}'}}}}\n"
            f"    decision: deny\n    reason: denied by a replay e2e draft\n")


def test_replay_shows_the_jobs_a_draft_would_deny(stack, console, page):
    platform = stack.env.get("CORDUM_PLATFORM_KEY", "")
    if not platform:
        pytest.fail("CORDUM_PLATFORM_KEY unknown: `make up` writes it")
    as_owner = {"X-API-Key": platform}
    mark = uuid.uuid4().hex[:8]
    bundle_id = f"e2e-replay-{mark}"
    rule_id = f"deny-{bundle_id}"
    started = time.time()

    # Jobs that ran under the policy in force (job.echo is allowed), marked with a label
    # no other test uses: only they match the draft.
    job_ids = [submit(stack, {"topic": "job.echo", "prompt": f"replay e2e {mark} {i}",
                              "labels": {"e2e-replay": mark}}) for i in range(JOBS)]
    for job_id in job_ids:
        assert stack.wait_terminal(job_id)["state"] == "SUCCEEDED"

    status, body = stack.http("PUT", f"/api/v1/policy/bundles/{bundle_id}",
                              {"content": deny_bundle(rule_id, mark), "message": "replay e2e"},
                              headers=as_owner)
    assert status == 200 and body["enabled"] is False, body
    try:
        # The tenant's admin may replay (policy.simulate) and list the bundles.
        sign_in(page, console, stack.key, stack.tenant)
        page.goto(f"{console}/govern/replay")
        settled(page)
        expect(page.get_by_role("heading", level=1)).to_have_text("Policy replay")
        page.get_by_role("combobox", name="Draft bundle").select_option(bundle_id)
        page.get_by_label("From", exact=True).fill(local_input(page, started - 600))
        page.get_by_label("To", exact=True).fill(local_input(page, time.time() + 300))
        page.get_by_role("button", name="Run replay").click()

        headline = page.get_by_test_id("replay-changed")
        expect(headline).to_be_visible(timeout=WAIT_MS)
        changed = int(re.match(r"\s*(\d+)", headline.inner_text()).group(1))
        assert changed >= JOBS, headline.inner_text()
        table = page.get_by_role("table", name=re.compile("decision changes"))
        for job_id in job_ids:
            link = table.get_by_role("link", name=job_id, exact=True)
            expect(link).to_be_visible()
            assert link.get_attribute("href") == f"/jobs/{job_id}"
            row = table.get_by_role("row").filter(
                has=page.get_by_role("link", name=job_id, exact=True))
            expect(row).to_contain_text("ALLOW")
            expect(row).to_contain_text("DENY")
            expect(row).to_contain_text(rule_id)
        screenshot(page, "replay")
        assert_accessible(page)

        # A link leads to the job.
        table.get_by_role("link", name=job_ids[0], exact=True).click()
        page.wait_for_url(re.compile(rf"/jobs/{job_ids[0]}$"), timeout=WAIT_MS)

        check_analytics(stack, console, page, job_ids)
    finally:
        stack.http("DELETE", f"/api/v1/policy/bundles/{bundle_id}", headers=as_owner)
    status, _ = stack.http("GET", f"/api/v1/policy/bundles/{bundle_id}", headers=as_owner)
    assert status == 404


def rule_hits_on_page(page: Page) -> dict[str, int]:
    """The rule hits table of the page: rule id -> hits."""
    section = page.get_by_role("region", name="Rule hits")
    table = section.get_by_role("table")
    if not table.is_visible():
        section.get_by_text("Show the numbers").click()
    out = {}
    for row in table.locator("tbody tr").all():
        out[row.locator("th").inner_text().strip()] = int(row.locator("td").first.inner_text())
    return out


def analytics_shown(page: Page, action) -> tuple[dict[str, Any], dict[str, int], int]:
    """The window the page asked for after ``action``, its rule hits and its total hits."""
    with page.expect_response(lambda r: r.url.endswith("/api/v1/policy/analytics")
                              and r.request.method == "POST", timeout=WAIT_MS) as answer:
        action()
    assert answer.value.status == 200
    window = answer.value.request.post_data_json
    section = page.get_by_role("region", name="Rule hits")
    expect(section.get_by_role("img")).to_be_visible(timeout=WAIT_MS)
    total = int(page.get_by_test_id("analytics-total-hits").inner_text())
    return window, rule_hits_on_page(page), total


def check_analytics(stack, console: str, page: Page, job_ids: list[str]) -> None:
    page.goto(f"{console}/govern/analytics")
    settled(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Policy analytics")
    for chart in ("Rule hits", "Approval latency", "Override and rejection rates"):
        expect(page.get_by_role("region", name=chart).get_by_role("img")).to_be_visible(
            timeout=WAIT_MS)

    _, job = stack.http("GET", f"/api/v1/jobs/{job_ids[0]}")
    # Other tests' jobs change state too: the page and the API are read again until one
    # reading of each agrees (the same window, read moments apart).
    action = lambda: page.get_by_role("radio", name="Last hour").check()  # noqa: E731
    seen: list[Any] = []
    for _ in range(6):
        window, shown, total = analytics_shown(page, action)
        assert window["from"].endswith("Z") and window["to"].endswith("Z"), window
        status, api = stack.http("POST", "/api/v1/policy/analytics",
                                 {"from": window["from"], "to": window["to"]})
        assert status == 200, api
        expected = {r["rule_id"]: r["hit_count"] for r in api["rules"]}
        if shown == expected and total == api["summary"]["total_hits"]:
            break
        seen.append((shown, total, expected, api["summary"]["total_hits"]))
        action = lambda: page.get_by_role("button", name="Refresh").click()  # noqa: E731
    else:
        pytest.fail(f"the page's figures never matched the API's: {seen}")
    assert total >= len(job_ids)
    rule = job.get("safety_rule_id") or job.get("policy_rule_id")
    if rule:
        assert shown.get(rule, 0) >= len(job_ids), (rule, shown)
    screenshot(page, "analytics")
    assert_accessible(page)
