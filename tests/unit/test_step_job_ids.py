"""Step job ids (cordum.step_job_ids): made and read in one place, the same way by the
bus, the scheduler and the runner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordum.step_job_ids import StepJobId, parse_step_job_id, step_job_id

RUN = "864dd991-5c02-4de0-82a1-2973c0b40a48"


def test_the_format_is_run_colon_path_at_attempt():
    assert step_job_id(RUN, "approve", 1) == f"{RUN}:approve@1"
    assert step_job_id(RUN, "fan[3]", 12) == f"{RUN}:fan[3]@12"
    assert str(StepJobId(RUN, "fan[3]", 12)) == f"{RUN}:fan[3]@12"


@pytest.mark.parametrize(("job_id", "parts"), [
    (f"{RUN}:approve@1", StepJobId(RUN, "approve", 1)),
    (f"{RUN}:fan[0]@2", StepJobId(RUN, "fan[0]", 2)),
    (f"{RUN}:loop[10]@0", StepJobId(RUN, "loop[10]", 0)),
    ("r:a:b@3", StepJobId("r", "a:b", 3)),    # the run ends at the first ':'
    ("r:a@b@4", StepJobId("r", "a@b", 4)),    # the attempt starts after the last '@'
])
def test_a_step_job_id_reads_back_into_its_parts(job_id, parts):
    assert parse_step_job_id(job_id) == parts


@pytest.mark.parametrize("job_id", [
    "ad190c9e-dbb0-4f04-9c9c-3cff1a83d9e7",  # an API job
    "", ":", "@", ":@1", "r:@1", ":a@1",     # a part missing
    "r:a", "r:a@", "r@1", "r:a@x", "r:a@-1", "r:a@+1", "r:a@1.0", "r:a@ 1",
    "r:a@01", "r:a@00",                      # a second spelling of an attempt
    "r:a@\u00b2", "r:a@\u0661",              # Unicode digits: '²' made int() raise
])
def test_any_other_id_is_not_a_step_job_id(job_id):
    assert parse_step_job_id(job_id) is None


_RUN_IDS = st.text(st.characters(blacklist_characters=":"), min_size=1)
_PATHS = st.text(min_size=1)


@given(_RUN_IDS, _PATHS, st.integers(min_value=0, max_value=10**9))
def test_made_ids_always_read_back(run_id, path, attempt):
    assert parse_step_job_id(step_job_id(run_id, path, attempt)) == StepJobId(
        run_id, path, attempt)


@given(st.text())
def test_an_id_that_reads_is_the_one_its_parts_make(job_id):
    parts = parse_step_job_id(job_id)
    assert parts is None or step_job_id(parts.run_id, parts.path, parts.attempt) == job_id
