"""Retry delays: Cordum's backoffDelay ranges, over many samples."""

from __future__ import annotations

import pytest

from cordum.scheduler.backoff import DEFAULT_BACKOFF, BackoffPolicy

SAMPLES = 2000


def delays(attempt: int, policy: BackoffPolicy = DEFAULT_BACKOFF) -> list[float]:
    return [policy.delay(attempt) for _ in range(SAMPLES)]


def test_first_attempt_waits_one_second_plus_jitter():
    samples = delays(0)
    assert all(1.0 <= d < 1.5 for d in samples)
    # Jitter is drawn per call: the samples are spread, not one repeated value.
    assert len(set(samples)) > SAMPLES // 2
    assert max(samples) - min(samples) > 0.4


def test_each_attempt_doubles_the_base():
    assert all(8.0 <= d < 8.5 for d in delays(3))
    assert all(2.0 <= d < 2.5 for d in delays(1))


def test_delay_never_exceeds_the_ceiling():
    assert all(d <= 30.0 for d in delays(5))
    assert all(29.5 <= d <= 30.0 for d in delays(100))
    assert all(d <= 30.0 for d in delays(10**9))


def test_negative_attempt_counts_as_the_first():
    assert all(1.0 <= d < 1.5 for d in delays(-5))


def test_shift_is_clamped():
    # With a ceiling far above 2**10, attempt 40 waits exactly as long as attempt 10.
    policy = BackoffPolicy(base_s=1.0, max_s=10_000.0, jitter_s=0.0, max_shift=10)
    assert policy.delay(10) == policy.delay(40) == 1024.0


def test_policy_fields_and_validation():
    policy = BackoffPolicy(base_s=0.25, max_s=2.0, jitter_s=0.0)
    assert [policy.delay(a) for a in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        BackoffPolicy(base_s=0)
    with pytest.raises(ValueError):
        BackoffPolicy(base_s=5, max_s=1)
    with pytest.raises(ValueError):
        BackoffPolicy(jitter_s=-1)
    with pytest.raises(ValueError):
        BackoffPolicy(max_shift=-1)
    with pytest.raises(AttributeError):
        DEFAULT_BACKOFF.base_s = 2.0  # type: ignore[misc]
