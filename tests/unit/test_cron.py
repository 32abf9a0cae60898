"""Cron occurrences and task declarations: the resolver against croniter itself, daylight
saving in Europe/Berlin, catch-up plans, and what ``task()`` refuses at declaration."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

import xjobs
from xjobs.cron import DEFAULT_RESOLVER, check_expression, check_zone, iso
from xjobs.errors import InvalidOption

BERLIN = "Europe/Berlin"
EXPRESSIONS = ["0 3 * * *", "30 2 * * *", "*/30 * * * *", "15 1-4 * * *", "0 */6 * * 1-5",
               "* * * * * */20", "45 23 L * *", "0 0 1 1 *"]


def ms(*parts: int, tz: str = "UTC") -> float:
    return datetime(*parts, tzinfo=ZoneInfo(tz)).timestamp() * 1000.0  # type: ignore[misc, arg-type]


def walls(times: list[float], tz: str = BERLIN) -> list[str]:
    return [iso(t, tz)[:19] for t in times]


@settings(max_examples=150, deadline=None)
@given(expr=st.sampled_from(EXPRESSIONS), zone=st.sampled_from([BERLIN, "America/New_York", "UTC", "Asia/Kolkata"]),
       start=st.integers(min_value=int(ms(2020, 1, 1)), max_value=int(ms(2030, 1, 1))),
       span=st.integers(min_value=0, max_value=10 * 86_400_000))
def test_occurrences_are_croniters_with_each_repeated_wall_time_once(expr, zone, start, span):
    tz = ZoneInfo(zone)
    end = start + span
    ours = DEFAULT_RESOLVER.between(expr, zone, start, end, 10_000)
    it = croniter(expr, datetime.fromtimestamp(start / 1000, tz=timezone.utc).astimezone(tz))
    theirs, seen = [], set()
    while True:
        moment = it.get_next(datetime)
        if moment.timestamp() * 1000 > end:
            break
        wall = moment.astimezone(tz).replace(tzinfo=None)
        if wall in seen:          # the second instant of a repeated wall-clock time
            continue
        seen.add(wall)
        theirs.append(moment.timestamp() * 1000.0)
    assert ours == theirs[:10_000]
    assert ours == sorted(set(ours))
    if ours:   # latest and after agree with the walk
        assert DEFAULT_RESOLVER.latest(expr, zone, ours[-1]) == ours[-1]
        assert DEFAULT_RESOLVER.after(expr, zone, start) == ours[0]


def test_berlin_spring_forward_fires_a_skipped_time_right_after_the_jump():
    fired = DEFAULT_RESOLVER.between("30 2 * * *", BERLIN, ms(2026, 3, 28, 12, 0), ms(2026, 3, 31, 12, 0), 10)
    assert walls(fired) == ["2026-03-29T03:00:00", "2026-03-30T02:30:00", "2026-03-31T02:30:00"]
    nightly = DEFAULT_RESOLVER.between("0 3 * * *", BERLIN, ms(2026, 3, 28, 12, 0), ms(2026, 3, 30, 12, 0), 10)
    assert walls(nightly) == ["2026-03-29T03:00:00", "2026-03-30T03:00:00"]
    assert nightly[1] - nightly[0] == 86_400_000.0          # both at 03:00 CEST


def test_berlin_fall_back_fires_a_repeated_time_once():
    fired = DEFAULT_RESOLVER.between("30 2 * * *", BERLIN, ms(2026, 10, 24, 12, 0), ms(2026, 10, 27, 12, 0), 10)
    assert walls(fired) == ["2026-10-25T02:30:00", "2026-10-26T02:30:00", "2026-10-27T02:30:00"]
    assert iso(fired[0], BERLIN).endswith("+02:00")         # the first of the two 02:30s
    half_hours = DEFAULT_RESOLVER.between("*/30 * * * *", BERLIN, ms(2026, 10, 24, 23, 0), ms(2026, 10, 25, 2, 30), 10)
    assert walls(half_hours) == ["2026-10-25T01:30:00", "2026-10-25T02:00:00", "2026-10-25T02:30:00",
                                 "2026-10-25T03:00:00", "2026-10-25T03:30:00"]


@pytest.mark.parametrize("tz", ["+02:00", "-05:00", "GMT+2 ", "Mars/Olympus_Mons", "", None, 7])
def test_a_zone_must_be_a_real_iana_name(tz):
    with pytest.raises(InvalidOption) as refused:
        check_zone(tz)
    assert refused.value.option == "tz"


@pytest.mark.parametrize("expr", ["* * *", "* * * * * * *", "61 * * * *", "0 3 * * mon-xyz", "", None, 5])
def test_a_bad_expression_is_refused(expr):
    with pytest.raises(InvalidOption) as refused:
        check_expression(expr)
    assert refused.value.option == "cron"


@pytest.fixture
def registry():
    return xjobs.Registry()


@pytest.fixture
def digest(registry):
    return xjobs.job(queue="reports", idempotency_key=lambda i: f"digest:{i['list']}", tenant="none",
                     registry=registry)(lambda ctx, i: None)


def declare(registry, digest, **kw):
    kw.setdefault("name", "nightly")
    kw.setdefault("cron", "0 3 * * *")
    kw.setdefault("tz", BERLIN)
    kw.setdefault("input", {"list": "all"})
    return xjobs.task(job=digest, registry=registry, **kw)


def test_a_task_is_registered_once_and_listed_by_code_point(registry, digest):
    b = declare(registry, digest, name="b")
    assert declare(registry, digest, name="b") is not None      # the same declaration again
    declare(registry, digest, name="B")
    declare(registry, digest, name="a")
    assert [t.name for t in registry.tasks()] == ["B", "a", "b"]
    with pytest.raises(xjobs.XJobsError) as clash:
        declare(registry, digest, name="b", cron="0 4 * * *")
    assert clash.value.code == "X_TASK_DUPLICATE"
    assert b.occurrence_key(1.8e12) == "task:b:1800000000000:digest:all"


@pytest.mark.parametrize("bad", [
    {"tz": "+02:00"}, {"tz": None}, {"cron": "0 3 * *"}, {"catch_up": "sometimes"},
    {"max_catch_up": 0}, {"max_catch_up": float("nan")}, {"input": {"wrong": 1}},
    {"input": {"list": float("inf")}}, {"name": ""}])
def test_a_task_that_could_never_run_is_refused_at_declaration(registry, digest, bad):
    with pytest.raises(xjobs.XJobsError):
        declare(registry, digest, **bad)


def test_task_enqueue_is_the_jobs_plain_key(registry, digest):
    from xjobs.drivers.memory import MemoryDriver
    from xjobs.testing import memory_queue
    nightly = declare(registry, digest)
    with memory_queue() as driver:
        result = nightly.enqueue()
        assert driver.job_get(result.id).idempotency_key == "digest:all"
    assert isinstance(driver, MemoryDriver)


class Every:
    """A resolver stub: an occurrence every ``step`` ms (tests choose the spacing)."""

    def __init__(self, step: float) -> None:
        self.step = step

    def between(self, expr, tz, after_ms, until_ms, limit):
        first = (after_ms // self.step + 1) * self.step
        out: list[float] = []
        t = first
        while t <= until_ms and len(out) < limit:
            out.append(t)
            t += self.step
        return out

    def latest(self, expr, tz, at_ms):
        return (at_ms // self.step) * self.step


def test_catch_up_after_24_missed_occurrences(registry, digest):
    hour = Every(3_600_000.0)
    watermark, now = 0.0, 24 * 3_600_000.0 + 5
    once = declare(registry, digest, name="once", catch_up="run-once")
    skip = declare(registry, digest, name="skip", catch_up="skip")
    every = declare(registry, digest, name="all", catch_up="run-all", max_catch_up=5)
    assert once.plan(watermark, now, hour) == ([3_600_000.0], 0)           # one run, the earliest
    assert skip.plan(watermark, now, hour) == ([24 * 3_600_000.0], 23)     # only the latest
    fired, dropped = every.plan(watermark, now, hour)
    assert (len(fired), dropped) == (5, 19)                                 # 5; 19 more were due
    assert fired == [n * 3_600_000.0 for n in range(1, 6)]
    assert once.plan(now, now, hour) == ([], 0) and skip.plan(now, now, hour) == ([], 0)


def test_zone_data_ships_with_the_package_not_only_with_the_host():
    """A host without system zoneinfo (a slim container, Windows) can still declare a task:
    ``tzdata`` is a dependency, and zoneinfo falls back to it."""
    import subprocess
    import sys
    from importlib.metadata import requires
    assert any(r.split(">")[0].split("=")[0].strip().lower() == "tzdata" for r in requires("xjobsd") or [])
    script = ("import xjobs, zoneinfo; assert not any(__import__('os').path.exists(p) for p in zoneinfo.TZPATH)\n"
              "h = xjobs.job(idempotency_key=str, tenant='none')(lambda ctx, i: None)\n"
              "xjobs.task(name='t', cron='0 3 * * *', tz='Europe/Berlin', job=h, input={})\n"
              "print('ok')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**__import__("os").environ, "PYTHONTZPATH": "/nonexistent-zoneinfo"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
