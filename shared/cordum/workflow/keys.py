"""Every Redis key of the workflow engine, and how long each lives.

Cordum keys definitions, runs and idempotency keys without the tenant; here a
definition and an idempotency key carry the tenant in their name, and a run (named
by a server-made uuid) carries it in its ``org_id``, which every read checks.
"""

from __future__ import annotations

from cordum.store.step_jobs import step_job_key

RUN_TTL_S = 30 * 24 * 3600
"""A terminal run (its JSON, definition snapshot, outbox and timeline) lives 30 days."""
JOB_MAP_TTL_S = RUN_TTL_S
"""``wf:run:job:<job_id>`` lives as long as a run can be open and then kept."""
IDEMPOTENCY_TTL_S = 7 * 24 * 3600
"""A run's idempotency key answers repeats for 7 days (Cordum keeps it forever)."""
TIMELINE_MAX = 1000
"""A run's timeline keeps its newest events, this many."""
RUN_LOCK_TTL_S = 30.0
"""The run lock's TTL: what a crashed holder blocks the run for."""
RUN_LOCK_RENEW_S = 10.0
"""The run lock's renewal interval (a third of the TTL)."""

TIMERS_KEY = "cordum:wf:delay:timers"
"""ZSET of ``<workflow_id>:<run_id>``, score = the run's earliest fire time (unix s)."""
OPEN_RUNS_KEY = "wf:runs:open"
"""ZSET of pending/running/waiting run ids by the later of their last update and the
reconciler's last look (µs): the reconciler's list, least recent first."""
RECONCILER_LOCK_KEY = "cordum:workflow-engine:reconciler:default"
RUN_LOCK_PREFIX = "cordum:wf:run:lock:"
RUN_ERRORS_TTL_S = 3600
"""A run's count of failed reconciler passes is forgotten an hour after its last one."""


def definition_key(tenant: str, workflow_id: str) -> str:
    return f"wf:def:{tenant}:{workflow_id}"


def definition_index_key(tenant: str) -> str:
    """ZSET of the tenant's workflow ids, score = updated_at (µs)."""
    return f"wf:index:org:{tenant}"


def run_key(run_id: str) -> str:
    return f"wf:run:{run_id}"


def run_definition_key(run_id: str) -> str:
    """The definition as it was when the run started."""
    return f"wf:run:def:{run_id}"


def outbox_key(run_id: str) -> str:
    """Effects written together with the run and removed once carried out."""
    return f"wf:run:outbox:{run_id}"


def workflow_runs_key(tenant: str, workflow_id: str) -> str:
    return f"wf:runs:{tenant}:{workflow_id}"


def tenant_runs_key(tenant: str) -> str:
    return f"wf:runs:org:{tenant}"


def active_runs_key(tenant: str) -> str:
    """SET of the tenant's open runs: the concurrent-run limit counts it."""
    return f"wf:runs:active:{tenant}"


def timeline_key(run_id: str) -> str:
    return f"wf:run:timeline:{run_id}"


def job_run_key(job_id: str) -> str:
    """The engine's record of a step's job (:mod:`cordum.store.step_jobs`)."""
    return step_job_key(job_id)


def idempotency_key(tenant: str, key: str) -> str:
    """Value ``"<run_id> <sha256 hex of the canonical body>"``."""
    return f"wf:run:idempotency:{tenant}:{key}"


def root_runs_key(root_run_id: str) -> str:
    """The number of child runs made under a root run, at any depth (lives ``RUN_TTL_S``
    from the last one made)."""
    return f"wf:run:tree:{root_run_id}"


def run_lock_key(run_id: str) -> str:
    return RUN_LOCK_PREFIX + run_id


def timer_member(workflow_id: str, run_id: str) -> str:
    return f"{workflow_id}:{run_id}"


def parse_timer_member(member: str) -> tuple[str, str]:
    """``<workflow_id>:<run_id>`` -> the pair; run ids (uuids) hold no colon."""
    workflow_id, _, run_id = member.rpartition(":")
    return workflow_id, run_id


def run_errors_key(run_id: str) -> str:
    """The reconciler's count of consecutive passes over the run that raised."""
    return f"cordum:wf:run:errors:{run_id}"
