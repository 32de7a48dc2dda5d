"""Workflow step job ids: the one place they are made and the one place they are read.

A step job's id is ``<run id>:<step path>@<attempt>`` (a for_each item's or a loop
iteration's path is ``<step>[i]``). The id alone ties a job to its run: the result
path hands a job's end to the run it names, the runner applies it only to the step
it names, and the scheduler refuses a request under such an id that the engine did
not send. Every one of them must read an id the same way, or an id one of them
takes for a step's job would pass another as an ordinary job; so they all read it
here, and the engine builds it here.

The rules are those of the strictest reader this module replaced (the runner's and
the scheduler's; the bus and the result path took any id with a ``:``), with the
attempt's spelling made exact. Every caller accepts them: the engine makes its ids
here, and nothing else makes a step job's.

- the run id is everything before the first ``:`` and is not empty (run ids are
  server-made uuids: they hold no ``:``);
- the step path is everything between that ``:`` and the last ``@``, not empty (a
  path may hold neither, but reading to the *last* ``@`` keeps that safe);
- the attempt is ASCII decimal digits without a leading zero ("0" itself aside):
  ``str(int(attempt))``, so an id reads back into exactly the parts it was made
  of, and no second spelling of one attempt (``@01``) can name a step's job.

Foundation layer: it imports nothing from ``cordum``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepJobId:
    """The parts of a step job id."""

    run_id: str
    path: str
    """The step's path in its run: a step id, or ``<step>[i]`` for an item."""
    attempt: int

    def __str__(self) -> str:
        return step_job_id(self.run_id, self.path, self.attempt)


def step_job_id(run_id: str, path: str, attempt: int) -> str:
    """``<run>:<step path>@<attempt>``: the id of a step's job for one attempt."""
    return f"{run_id}:{path}@{attempt}"


def parse_step_job_id(job_id: str) -> StepJobId | None:
    """The parts of a step job id; None for any other id (see the module's rules)."""
    run_id, colon, rest = job_id.partition(":")
    path, at, attempt = rest.rpartition("@")
    if not (colon and at and run_id and path and _canonical_count(attempt)):
        return None
    return StepJobId(run_id, path, int(attempt))


def _canonical_count(text: str) -> bool:
    """``text`` is ``str(n)`` of some n >= 0 (``str.isdigit`` alone takes "²" and
    other Unicode digits, some of which ``int`` refuses)."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")
