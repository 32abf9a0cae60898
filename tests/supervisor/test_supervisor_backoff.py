"""Restart backoff: exponential, capped, equal jitter; a stable run resets; crash loops show."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from xjobs.errors import InvalidOption
from xjobs.supervisor.backoff import Backoff


@given(st.integers(1, 200), st.floats(0.0, 1.0))
def test_delay_is_half_fixed_half_random_under_the_cap(failures, rand):
    b = Backoff(base_s=0.1, cap_s=30.0)
    ceiling = min(30.0, 0.1 * 2 ** (failures - 1)) if failures < 60 else 30.0
    delay = b.delay(failures, rand)
    assert ceiling / 2 - 1e-9 <= delay <= ceiling + 1e-9
    assert math.isfinite(delay)


@given(st.integers(1, 100))
def test_ceiling_never_shrinks_as_failures_grow(failures):
    b = Backoff()
    assert b.delay(failures, 1.0) <= b.delay(failures + 1, 1.0)


def test_first_restart_is_quick_and_the_cap_holds():
    b = Backoff()
    assert b.delay(1, 1.0) <= 0.1
    assert b.delay(0) == 0.0
    assert b.delay(10_000, 1.0) == b.cap_s


def test_crash_loops_are_named_by_failed_starts_or_by_exits_in_a_window():
    b = Backoff(crash_loop_after=3)
    assert not b.in_crash_loop(2) and b.in_crash_loop(3)
    assert not b.in_crash_loop(0, recent_exits=2) and b.in_crash_loop(0, recent_exits=3)


@given(st.integers(1, 500), st.floats(0.0, 1.0))
def test_a_child_that_had_got_ready_is_back_within_the_cap(deaths, rand):
    b = Backoff(base_s=0.1, after_ready_cap_s=1.0)
    wait = b.after_ready(deaths, rand)
    assert 0.05 - 1e-9 <= wait <= 1.0 + 1e-9
    assert b.after_ready(1, 1.0) <= 0.1               # a single outside kill: back at once


def test_the_restart_curve_is_the_retry_curve():
    from xjobs.retry import Retry
    b = Backoff(base_s=0.2, cap_s=5.0)
    policy = Retry(attempts=100, delay=200, max_delay=5000, jitter=True)
    for n in (1, 2, 5, 40):
        assert b.delay(n, 0.3) == policy.delay_after(n, lambda: 0.3) / 1000.0


@pytest.mark.parametrize("kwargs", [{"base_s": math.nan}, {"cap_s": math.inf}, {"base_s": -1.0},
                                    {"crash_loop_after": 2.5}, {"cap_s": 0.01, "base_s": 1.0}])
def test_bad_knobs_are_refused(kwargs):
    with pytest.raises(InvalidOption):
        Backoff(**kwargs)
