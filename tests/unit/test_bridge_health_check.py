"""The bridge container's health check (``python -m cordum.bus.health``): it passes
while the liveness file the bridge touches after each answered probe is fresh."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cordum.bus.health import HEALTH_MAX_AGE_S, liveness_age, main
from cordum.bus.settings import ENV_HEALTH_FILE

BRIDGE_ENV = {"SUBMIT_QUEUE_URL": "https://sqs/submit", "RESULT_QUEUE_URL": "https://sqs/result"}


def _check(monkeypatch: pytest.MonkeyPatch, **env: str) -> int:
    for name in (ENV_HEALTH_FILE, *BRIDGE_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0)


def _aged(path: Path, seconds: float) -> Path:
    path.touch()
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_a_freshly_touched_file_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alive = _aged(tmp_path / "alive", 5)
    assert _check(monkeypatch, **BRIDGE_ENV, BRIDGE_HEALTH_FILE=str(alive)) == 0


def test_a_file_older_than_the_bound_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alive = _aged(tmp_path / "alive", HEALTH_MAX_AGE_S + 5)
    assert _check(monkeypatch, **BRIDGE_ENV, BRIDGE_HEALTH_FILE=str(alive)) == 1
    assert "last answered probe" in capsys.readouterr().err


def test_no_file_yet_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a bridge whose first probe has not been answered (still connecting)
    missing = tmp_path / "alive"
    assert liveness_age(missing) is None
    assert _check(monkeypatch, **BRIDGE_ENV, BRIDGE_HEALTH_FILE=str(missing)) == 1


def test_without_the_setting_the_check_fails_and_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(monkeypatch, **BRIDGE_ENV) == 1
    assert ENV_HEALTH_FILE in capsys.readouterr().err


def test_liveness_age_counts_from_the_last_touch(tmp_path: Path) -> None:
    alive = _aged(tmp_path / "alive", 30)
    age = liveness_age(alive)
    assert age is not None and 29 <= age < 35
    # and a clock behind the file's time reads as just touched
    assert liveness_age(alive, now=0.0) == 0.0
