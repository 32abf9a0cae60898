"""The retry curve and decision: pure functions, so Hypothesis checks them exhaustively."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xjobs.errors import RetryAfter, Terminal
from xjobs.retry import Retry, decide
from xjobs.options import duration_ms

# milliseconds: zero, or at least a microsecond (below that, float rounding of half the curve
# is all the test would measure)
delays = st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=3_600_000))
attempts = st.integers(min_value=1, max_value=10_000)


@given(delays, delays, attempts, st.sampled_from(["exponential", "linear", "constant"]),
       st.floats(min_value=0, max_value=1, exclude_max=True))
def test_delay_is_clamped_before_equal_jitter(a, b, attempt, backoff, rand):
    low, high = sorted((a, b))
    policy = Retry(attempts=10, delay=low, max_delay=high, backoff=backoff, jitter=True)
    curve = policy.curve_ms(attempt)
    assert curve <= high
    delay = policy.delay_after(attempt, lambda: rand)
    assert curve / 2 <= delay <= curve          # equal jitter: half fixed, half random
    assert delay <= high


@given(delays, attempts)
def test_curves_grow_as_documented(delay, attempt):
    top = 10 * 3_600_000.0
    expo = Retry(delay=delay, max_delay=top, backoff="exponential", jitter=False)
    linear = Retry(delay=delay, max_delay=top, backoff="linear", jitter=False)
    constant = Retry(delay=delay, max_delay=top, backoff="constant", jitter=False)
    assert constant.delay_after(attempt) == delay
    assert linear.delay_after(attempt) == min(delay * attempt, top)
    assert expo.delay_after(attempt) == min(delay * 2.0 ** min(attempt - 1, 64), top)
    assert expo.delay_after(attempt) <= expo.delay_after(attempt + 1)


@given(attempts, st.integers(min_value=1, max_value=10_000))
def test_decision_reads_the_error_and_the_attempt(attempt, max_attempts):
    policy = Retry(attempts=5, delay="1s", max_delay="1m", jitter=False)
    assert decide(policy, attempt, max_attempts, Terminal("no")).dead
    plain = decide(policy, attempt, max_attempts, ValueError("x"))
    assert plain.dead == (attempt >= max_attempts)
    stated = decide(policy, attempt, max_attempts, RetryAfter(3600))
    if not stated.dead:
        assert stated.delay_ms == 60_000          # clamped by max_delay
    odd = decide(policy, attempt, max_attempts, RetryAfter(float("nan")))
    if not odd.dead:
        assert 0 <= odd.delay_ms <= 60_000         # a NaN retry-after falls back to the curve


@given(st.floats(min_value=0, max_value=1e6), st.sampled_from(["ms", "s", "m", "h"]))
def test_duration_units(value, unit):
    factor = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[unit]
    text = f"{value:.3f}{unit}"
    expected = float(f"{value:.3f}") * factor
    if expected <= 10 * 365 * 86_400_000:
        assert duration_ms(text, "x") == expected
