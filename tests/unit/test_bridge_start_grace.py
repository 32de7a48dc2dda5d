"""The bridge's health check before its first answered probe: a bridge waiting for a
NATS that comes up with the stack passes for STARTUP_GRACE_S from its start, then
fails like a dead one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cordum.bus.health import STARTUP_GRACE_S, main, mark_starting, starting_file
from cordum.bus.settings import ENV_HEALTH_FILE

BRIDGE_ENV = {"SUBMIT_QUEUE_URL": "https://sqs/submit", "RESULT_QUEUE_URL": "https://sqs/result"}


def _check(monkeypatch: pytest.MonkeyPatch, health_file: Path) -> int:
    for name, value in {**BRIDGE_ENV, ENV_HEALTH_FILE: str(health_file)}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_bridge_waiting_for_nats_passes_within_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alive = tmp_path / "alive"
    # Given a bridge that started 5 minutes ago and has had no answer from JetStream
    mark_starting(alive)
    _age(starting_file(alive), 300)
    # Then its check passes, and says why
    assert _check(monkeypatch, alive) == 0
    assert "waiting for NATS" in capsys.readouterr().err


def test_past_the_grace_a_bridge_without_an_answer_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alive = tmp_path / "alive"
    mark_starting(alive)
    _age(starting_file(alive), STARTUP_GRACE_S + 5)
    assert _check(monkeypatch, alive) == 1
    assert "no probe answered yet" in capsys.readouterr().err


def test_once_a_probe_answered_the_grace_no_longer_covers_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alive = tmp_path / "alive"
    # Given a bridge that started a minute ago, answered once, then lost NATS for 61 s
    mark_starting(alive)
    alive.touch()
    _age(alive, 61)
    # Then the liveness bound applies, whatever the start-up grace
    assert _check(monkeypatch, alive) == 1


def test_without_a_health_file_nothing_is_marked(tmp_path: Path) -> None:
    mark_starting(None)
    assert list(tmp_path.iterdir()) == []
