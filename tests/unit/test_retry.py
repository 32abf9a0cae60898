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


def test_the_default_policy_is_durable_api():
    from xjobs import DEFAULT_RETRY, retry_schedule
    assert (DEFAULT_RETRY.attempts, DEFAULT_RETRY.delay_ms, DEFAULT_RETRY.max_delay_ms,
            DEFAULT_RETRY.backoff, DEFAULT_RETRY.jitter) == (5, 1000.0, 600_000.0, "exponential", True)
    assert retry_schedule(DEFAULT_RETRY) == [(0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0)]
    assert retry_schedule(Retry(attempts=4, delay="1m", max_delay="90s", jitter=False)) == [
        (60.0, 60.0), (90.0, 90.0), (90.0, 90.0)]
    assert retry_schedule(Retry(attempts=1)) == []


class Upstream(Exception):
    pass


class RateLimited(Upstream):
    pass


class Invalid(ValueError):
    pass


def test_exceptions_you_did_not_write_are_classified_by_the_job():
    policy = Retry(attempts=5, delay=0, jitter=False)

    def verdict(error, **kw):
        return decide(policy, 1, 5, error, **kw)
    assert verdict(Invalid("x"), terminal_on=(ValueError,)).dead
    assert "terminal_on" in verdict(Invalid("x"), terminal_on=(ValueError,)).reason
    assert not verdict(KeyError("x"), terminal_on=(ValueError,)).dead          # not listed: the policy
    # only what retry_on lists is retried
    assert not verdict(RateLimited(), retry_on=(Upstream,)).dead
    assert "not in retry_on" in verdict(KeyError("x"), retry_on=(Upstream,)).reason
    # both match: the nearer class in the error's MRO decides
    assert not verdict(RateLimited(), terminal_on=(Upstream,), retry_on=(RateLimited,)).dead
    assert verdict(RateLimited(), terminal_on=(RateLimited,), retry_on=(Upstream,)).dead
    # the explicit ones still win
    assert verdict(Terminal("stop"), retry_on=(Exception,)).dead
    assert not verdict(RetryAfter(3), terminal_on=(RetryAfter,)).dead
    assert verdict(RetryAfter(3), terminal_on=(RetryAfter,)).delay_ms == 3000.0


def test_job_refuses_what_is_not_an_exception_class():
    import pytest

    import xjobs
    from xjobs.errors import InvalidOption
    registry = xjobs.Registry()
    for bad in ("ValueError", (ValueError, 3), (int,), 42):
        with pytest.raises(InvalidOption):
            xjobs.job(idempotency_key=str, tenant="none", registry=registry, terminal_on=bad)(lambda c, i: None)
    with pytest.raises(InvalidOption):
        xjobs.job(idempotency_key=str, tenant="none", registry=registry, retry_on=(KeyError,),
                  terminal_on=(KeyError,))(lambda c, i: None)
    handle = xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="one",
                       terminal_on=ValueError)(lambda c, i: None)
    assert handle.terminal_on == (ValueError,) and handle.retry_on == ()


def test_one_curve_and_jitter_in_the_package():
    """The backoff curve (a power of two with a variable exponent) and its jitter (a random
    draw) live in retry.py; a second copy anywhere else would drift from it."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "xjobs"
    copies = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "retry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            curve = (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
                     and isinstance(node.left, ast.Constant) and node.left.value in (2, 2.0)
                     and not isinstance(node.right, ast.Constant))
            draw = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("random", "uniform", "expovariate"))
            if curve or draw:
                copies.append(f"{path.relative_to(root)}:{node.lineno}")  # type: ignore[attr-defined]
    assert copies == [], f"a second curve or jitter: {copies}; use xjobs.retry.Retry"


@given(st.integers(min_value=1, max_value=50), st.integers(min_value=0, max_value=20),
       st.sampled_from(["retry_after", "retry_on", "plain"]),
       st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6), st.none()))
def test_the_attempt_ceiling_outranks_every_classification_but_terminal(max_attempts, beyond, kind, seconds):
    """An exhausted RetryAfter or retry_on error goes dead: the ceiling holds."""
    policy = Retry(attempts=max_attempts, delay="1s")
    error = RetryAfter(seconds) if kind == "retry_after" else RateLimited() if kind == "retry_on" else KeyError("x")
    verdict = decide(policy, max_attempts + beyond, max_attempts, error,
                     retry_on=(Upstream,) if kind == "retry_on" else ())
    assert verdict.dead and "attempts exhausted" in verdict.reason
    if max_attempts > 1:                       # one attempt earlier it is retried
        assert not decide(policy, max_attempts - 1, max_attempts, error,
                          retry_on=(Upstream,) if kind == "retry_on" else ()).dead
