"""The one SQS batch loop (cordum.lambdas.sqs_batch): partial batch responses, retry
delays, and SQS FIFO's order within a message group; no AWS and no Redis."""

from __future__ import annotations

import asyncio
from typing import Any

from cordum.lambdas.sqs_batch import Record, Redeliver, VisibilityDelayer, run_batch


class Delays(VisibilityDelayer):
    """Records the visibility timeouts asked for instead of calling SQS."""

    def __init__(self, name: str = "queue", seen: list[tuple[str, str, float]] | None = None):
        super().__init__(None)
        self.name = name
        self.seen = seen if seen is not None else []

    def delay(self, receipt_handle: str, seconds: float) -> None:
        self.seen.append((self.name, receipt_handle, seconds))


def record(message_id: str, group: str = "", source: str = "arn:q") -> Record:
    out: dict[str, Any] = {"messageId": message_id, "receiptHandle": f"rh-{message_id}",
                           "body": message_id, "eventSourceARN": source}
    if group:
        out["attributes"] = {"MessageGroupId": group}
    return out


def failures(answer: dict[str, list[dict[str, str]]]) -> list[str]:
    return [f["itemIdentifier"] for f in answer["batchItemFailures"]]


def test_done_records_are_left_out_and_each_failure_comes_back_as_its_handler_says():
    outcomes: dict[str, Any] = {"ok": None, "later": Redeliver(7.5), "never": Redeliver(0),
                                "boom": RuntimeError("boom")}

    async def handle(r: Record) -> Redeliver | None:
        outcome = outcomes[r["body"]]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    delays = Delays()
    answer = run_batch({"Records": [record(m) for m in outcomes]}, handle, delays)
    assert failures(answer) == ["later", "never", "boom"]
    # A handler that raised leaves the record to the queue's visibility timeout.
    assert delays.seen == [("queue", "rh-later", 7.5), ("queue", "rh-never", 0)]


def test_a_groups_later_records_wait_for_its_retried_one_and_other_groups_go_on():
    handled: list[str] = []

    async def handle(r: Record) -> Redeliver | None:
        handled.append(r["body"])
        await asyncio.sleep(0)
        return Redeliver(1.0) if r["body"] == "a2" else None

    delays = Delays()
    records = [record("a1", "run-a"), record("b1", "run-b"), record("a2", "run-a"),
               record("a3", "run-a"), record("b2", "run-b")]
    answer = run_batch({"Records": records}, handle, delays)
    assert failures(answer) == ["a2", "a3"]
    assert "a3" not in handled  # never applied before the event it follows
    assert handled.index("a1") < handled.index("a2")
    assert {"b1", "b2"} <= set(handled)
    assert sorted(delays.seen) == [("queue", "rh-a2", 1.0), ("queue", "rh-a3", 1.0)]


def test_a_delayer_is_picked_per_record_for_a_function_fed_by_two_queues():
    seen: list[tuple[str, str, float]] = []
    fifo, timers = Delays("fifo", seen), Delays("timers", seen)

    async def handle(r: Record) -> Redeliver | None:
        return Redeliver(1.0)

    answer = run_batch(
        {"Records": [record("e", "run", source="arn:events.fifo"), record("t")]}, handle,
        lambda r: fifo if r["eventSourceARN"].endswith(".fifo") else timers)
    assert failures(answer) == ["e", "t"]
    assert sorted(seen) == [("fifo", "rh-e", 1.0), ("timers", "rh-t", 1.0)]


def test_an_empty_event_answers_no_failures():
    async def handle(r: Record) -> Redeliver | None:
        raise AssertionError("no record to handle")

    assert run_batch({}, handle, Delays()) == {"batchItemFailures": []}
