"""``cordumctl jobs remediate`` and the offers ``jobs get`` shows, against a stub API."""

from __future__ import annotations

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

REMEDIATE = "/api/v1/jobs/j1/remediate"
OFFERS = [
    {"id": "use-safe", "title": "Use the sandboxed worker", "summary": "",
     "replacement_topic": "job.safe", "replacement_capability": "", "add_labels": {},
     "remove_labels": []},
    {"id": "smaller", "title": "", "replacement_topic": "job.small"},
]


def test_remediate_sends_the_id_and_prints_the_new_job() -> None:
    api = StubApi().on("POST", REMEDIATE, reply(200, {"job_id": "j2", "trace_id": "t1"}))
    out = run_cli(api, "-o", "table", "jobs", "remediate", "j1", "use-safe",
                  "--idempotency-key", "k-1")
    assert out.code == ExitCode.OK and out.out.strip() == "j2"
    assert api.body("POST", REMEDIATE) == {"remediation_id": "use-safe"}
    assert api.sent("POST", REMEDIATE)[0].headers["Idempotency-Key"] == "k-1"


def test_remediate_without_an_id_lets_the_api_pick_the_only_one() -> None:
    api = StubApi().on("POST", REMEDIATE, reply(200, {"job_id": "j2", "trace_id": "t1"}))
    out = run_cli(api, "jobs", "remediate", "j1")
    assert out.json() == {"job_id": "j2", "trace_id": "t1"}
    assert api.body("POST", REMEDIATE) in ({}, None)


def test_a_remediated_job_waiting_for_a_human_says_so() -> None:
    api = StubApi().on("POST", REMEDIATE, reply(200, {
        "job_id": "j2", "trace_id": "t1", "status": "approval_required",
        "reason": "a human must look"}))
    out = run_cli(api, "-o", "table", "jobs", "remediate", "j1", "use-safe").out
    assert "j2" in out and "APPROVAL_REQUIRED" in out and "a human must look" in out


def test_remediate_errors_exit_with_their_codes() -> None:
    cases = [(error(404, "remediation not found", "remediation_not_found"),
              ExitCode.NOT_FOUND),
             (error(409, "no remediations available", "no_remediations"), ExitCode.CONFLICT),
             (error(403, "still denied", "safety_denied"), ExitCode.AUTH),
             (error(400, "remediation_id required"), ExitCode.INVALID)]
    for answer, code in cases:
        api = StubApi().on("POST", REMEDIATE, answer)
        out = run_cli(api, "jobs", "remediate", "j1", "x")
        assert out.code == code, out.err


def test_jobs_get_shows_the_offers_with_their_ids() -> None:
    job = {"id": "j1", "state": "DENIED", "topic": "job.risky", "safety_decision": "DENY",
           "safety_remediations": OFFERS}
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, job))
    out = run_cli(api, "-o", "table", "jobs", "get", "j1").out
    line = next(x for x in out.splitlines() if x.startswith("remediations"))
    assert "use-safe: Use the sandboxed worker (job.safe)" in line
    assert "smaller: use job.small" in out
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {**job, "safety_remediations": []}))
    assert "remediations" not in run_cli(api, "-o", "table", "jobs", "get", "j1").out
