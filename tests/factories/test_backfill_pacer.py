"""The pacer on a manual clock (a fixture of its own: a clock the pacer's sleeps move by hand),
and through a pass: its wait is the first thing inside a batch's step, so a replayed batch pays
nothing; a stop signal aborts it before and after the wait."""

from __future__ import annotations

import math

import pytest

from xjobs.clock import ManualClock
from xjobs.context import RunSignal
from xjobs.errors import Aborted, InvalidOption
from xjobs.factories.pacer import Pacer

from .backfill_fixture import Harness, the_spec


class Sleeper:
    """Sleeps by moving the manual clock; may set the signal mid-sleep, as a drain would."""

    def __init__(self, clock: ManualClock, abort_during: bool = False):
        self.clock = clock
        self.slept: list[float] = []
        self.abort_during = abort_during

    def __call__(self, signal, seconds):
        self.slept.append(seconds)
        if self.abort_during:
            signal.abort("X_DRAINING", "drained mid-wait")
            return True
        self.clock.advance(seconds * 1000.0)
        return False


@pytest.fixture
def clock():
    return ManualClock(start_ms=1_000_000.0)


def test_the_pacer_hands_out_one_slot_per_interval(clock):
    sleeper = Sleeper(clock)
    pacer = Pacer(4, clock=clock, sleep=sleeper)
    signal = RunSignal()
    for _ in range(3):
        pacer.wait(signal)
    assert sleeper.slept == [0.25, 0.25]          # the first slot is now
    clock.advance(1000)                           # idle for a second: no debt carried over
    pacer.wait(signal)
    assert sleeper.slept == [0.25, 0.25] and pacer.waits == 4
    assert pacer.waited_ms == pytest.approx(500.0)


def test_an_aborted_run_is_refused_before_the_wait_and_after_it(clock):
    pacer = Pacer(1, clock=clock, sleep=Sleeper(clock))
    stopped = RunSignal()
    stopped.abort("X_JOB_CANCELLED", "cancelled")
    with pytest.raises(Aborted) as before:
        pacer.wait(stopped)
    assert before.value.code == "X_ABORTED" and pacer.waits == 0
    sleeper = Sleeper(clock, abort_during=True)
    pacer = Pacer(1, clock=clock, sleep=sleeper)
    pacer.wait(RunSignal())                      # the first slot: no wait
    with pytest.raises(Aborted) as after:
        pacer.wait(RunSignal())                  # its wait ended early: over, not arrived
    assert after.value.code == "X_ABORTED" and sleeper.slept == [1.0]


@pytest.mark.parametrize("rate", [0, -1, 0.0, math.nan, math.inf, True, False, "5", None])
def test_the_pacer_refuses_a_rate_that_would_not_throttle(rate):
    with pytest.raises(InvalidOption) as err:
        Pacer(rate)
    assert err.value.option == "rate"


def test_replayed_batches_pay_no_throttle(memory_driver):
    harness = Harness(memory_driver, rows=45, fail_on_batch=3)
    clock = ManualClock()
    handle = harness.declare(rate=2)
    spec = the_spec(handle)
    sleeper = Sleeper(clock)
    spec.pacer._clock, spec.pacer._sleep = clock, sleeper
    harness.enqueue(handle)
    harness.run()
    # 5 batches; batch 3 failed once and ran again; the retry replayed 0, 1 and 2 without a wait
    assert spec.pacer.waits == 6 and len(harness.table.reads) == 6
    assert sleeper.slept == [0.5] * 5
