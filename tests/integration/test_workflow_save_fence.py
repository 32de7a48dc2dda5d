"""A run is saved only under the lock it was read under: the save script checks the
lock's token itself, so a holder whose lease ran out (or whose run another holder took)
writes nothing, neither the run nor its outbox, step jobs' mappings or timeline."""

from __future__ import annotations

import pytest

from cordum.workflow import keys
from cordum.workflow.model import RunStatus
from cordum.workflow.store import LockLost
from tests.integration.test_workflow_store import env, event  # noqa: F401  (fixture)


def test_a_save_whose_lock_is_no_longer_the_savers_writes_nothing(env):  # noqa: F811
    wf = env.definition()
    run = env.new_run(wf)
    job_id = f"{run.id}:a@1"
    lock = keys.run_lock_key(run.id)

    async def scenario():
        await env.create(run, wf)
        out = {}
        async with env.store.locked_run(run.id) as locked:
            mine = locked.loaded[0]
            mine.status = RunStatus.RUNNING
            await env.store.save(mine, timeline=[event(mine, 1)], outbox=[{"cancel": "x"}],
                                 lease=locked.lease)  # held: saved
            out["held"] = await env.redis.get(keys.run_key(run.id))
            # Taken: the key names another holder, as after an expiry and a new take.
            await env.redis.set(lock, "another-holder", px=30_000)
            mine.status = RunStatus.SUCCEEDED
            with pytest.raises(LockLost):
                await env.store.save(mine, timeline=[event(mine, 2)],
                                     outbox=[{"cancel": "y"}], jobs={job_id: "a"},
                                     contexts={job_id: "{}"}, lease=locked.lease)
            out["taken"] = (await env.redis.get(keys.run_key(run.id)),
                            await env.redis.get(keys.outbox_key(run.id)),
                            await env.redis.exists(keys.job_run_key(job_id), f"ctx:{job_id}"),
                            await env.redis.llen(keys.timeline_key(run.id)))
            # Expired: no lock at all.
            await env.redis.delete(lock)
            with pytest.raises(LockLost):
                await env.store.save(mine, timeline=[], outbox=None, lease=locked.lease)
            out["expired"] = await env.redis.get(keys.run_key(run.id))
            await env.redis.set(lock, "another-holder", px=30_000)
        out["left"] = await env.redis.get(lock)  # the release left the other holder's lock
        await env.redis.delete(lock)
        return out

    out = env.run(scenario())
    assert b'"status":"running"' in out["held"]
    assert out["taken"] == (out["held"], b'[{"cancel":"x"}]', 0, 1)
    assert out["expired"] == out["held"]
    assert out["left"] == b"another-holder"
