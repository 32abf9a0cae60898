"""The transactional outbox from the application's side (``xjobs.outbox.stage``) and the relay
role on both drivers: a committed stage becomes one job, a rolled-back one none; refusals come
before anything is written; the relay's knobs are checked at construction; a failed claim never
stops it, a failed publish hands the batch back, and a relay that stalled past its lease
publishes nothing another relay now holds. On Postgres the relay wakes on the staging
transaction's notification, not at its next poll."""

from __future__ import annotations

import math
import time
from typing import Any

import psycopg
import pytest

import xjobs
from xjobs.config import Settings
from xjobs.drivers.base import ListFilter
from xjobs.errors import InvalidOption, PayloadInvalid, PayloadTooLarge
from xjobs.outbox import stage, stage_many
from xjobs.workers.drive import drive
from xjobs.workers.outbox_relay import OutboxRelay


@pytest.fixture
def receipt():
    registry = xjobs.Registry()
    return xjobs.job(queue="mail", idempotency_key=lambda i: f"receipt:{i['order']}", tenant="none",
                     registry=registry)(lambda ctx, i: None)


def relay(driver, name: str = "relay-1", **kwargs: Any) -> OutboxRelay:
    role = OutboxRelay(driver=driver, identity=name, settings=Settings(outbox_lease_ms=1_000), poll=60_000,
                       clock=lambda: 0.0, **kwargs)
    role.initialize()
    return role


def keys(driver) -> list[str]:
    return sorted(v.idempotency_key for v in driver.job_list(ListFilter(limit=1000)))


def test_staged_rows_become_one_job_each_through_the_relay(driver, receipt):
    ids = stage_many(None, receipt, [{"order": n} for n in range(3)], driver=driver)
    one = stage(None, receipt, {"order": 3}, driver=driver)
    assert len(set(ids + [one])) == 4
    assert keys(driver) == []                        # nothing is a job until the relay runs
    role = relay(driver, batch=2)
    role.publish()
    assert keys(driver) == [f"receipt:{n}" for n in range(4)]
    assert role.stats().published == 4 and role.stats().batches == 2
    assert driver.outbox_summary().pending == 0
    role.publish()
    assert len(keys(driver)) == 4                    # published once


@pytest.mark.parametrize("bad, code", [
    ({"no-order": 1}, PayloadInvalid),               # the key function cannot read it
    ({"order": 1, "blob": "x" * 2_000_000}, PayloadTooLarge),   # past max_payload_bytes
    ({"order": math.nan}, PayloadInvalid),           # not JSON
])
def test_a_refused_input_writes_nothing(driver, receipt, bad, code):
    with pytest.raises(code):
        stage_many(None, receipt, [{"order": 0}, bad], driver=driver)
    assert driver.outbox_summary().pending == 0


@pytest.mark.parametrize("knobs", [{"batch": 0}, {"batch": math.inf}, {"batch": "ten"}, {"poll": math.nan},
                                   {"poll": -1}])
def test_relay_knobs_are_checked_at_construction(memory_driver, knobs):
    with pytest.raises(InvalidOption):
        OutboxRelay(driver=memory_driver, identity="r", **knobs)
    with pytest.raises(InvalidOption):
        OutboxRelay(driver=memory_driver, identity="r", settings=Settings(outbox_lease_ms=0))


class Flaky:
    """The real driver, with chosen outbox calls failing as a lost connection would."""

    def __init__(self, driver: Any, failing: set[str]) -> None:
        self._driver = driver
        self.failing = failing

    def __getattr__(self, name: str) -> Any:
        if name in self.failing:
            def fail(*args: Any, **kwargs: Any) -> Any:
                raise psycopg.OperationalError(f"{name}: server closed the connection unexpectedly")
            return fail
        return getattr(self._driver, name)


def _events(caplog, name: str) -> list:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_a_failed_claim_never_stops_the_relay(driver, receipt, caplog):
    stage(None, receipt, {"order": 1}, driver=driver)
    flaky = Flaky(driver, {"outbox_claim"})
    role = relay(flaky)
    assert role.run_once(0.0) > 0                    # backs off instead of raising
    assert role.stats().claim_failed == 1 and keys(driver) == []
    [record] = _events(caplog, "relay.claim.failed")
    assert record.levelname == "WARNING" and record.relay == "relay-1"
    flaky.failing.clear()
    role.publish()
    assert keys(driver) == ["receipt:1"]


def test_a_failed_publish_hands_the_batch_back_at_once(driver, receipt, clock, caplog):
    stage_many(None, receipt, [{"order": 1}, {"order": 2}], driver=driver)
    role = relay(Flaky(driver, {"outbox_publish"}))
    role.publish()
    assert role.stats().publish_failed == 1 and role.stats().released == 2
    [record] = _events(caplog, "relay.publish.failed")
    assert (record.levelname, record.count) == ("ERROR", 2)
    other = relay(driver, "relay-2")                 # no need to wait out the lease
    other.publish()
    assert keys(driver) == ["receipt:1", "receipt:2"]


def test_a_failed_release_is_left_to_the_claims_lease(driver, receipt, clock, caplog):
    stage(None, receipt, {"order": 1}, driver=driver)
    role = relay(Flaky(driver, {"outbox_publish", "outbox_release"}))
    role.publish()
    [record] = _events(caplog, "relay.release.failed")
    assert record.levelname == "WARNING"
    other = relay(driver, "relay-2")
    other.publish()
    assert keys(driver) == []                        # still claimed: the lease frees it
    clock.advance(1_001)
    other.publish()
    assert keys(driver) == ["receipt:1"]


class Stalling:
    """Pauses a relay between its claim and its publish, as a SIGSTOP would, while another
    relay takes the rows over after the lease."""

    def __init__(self, driver: Any, meanwhile: Any) -> None:
        self._driver = driver
        self.meanwhile = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def outbox_claim(self, *args: Any) -> Any:
        claim = self._driver.outbox_claim(*args)
        if claim.ids and self.meanwhile is not None:
            self.meanwhile()
            self.meanwhile = None
        return claim


def test_a_relay_stalled_past_its_lease_publishes_nothing_another_holds(driver, receipt, clock, caplog):
    stage_many(None, receipt, [{"order": 1}, {"order": 2}], driver=driver)
    other = relay(driver, "relay-2")

    def take_over() -> None:
        clock.advance(1_001)
        other.publish()

    stalled = relay(Stalling(driver, take_over))
    stalled.publish()
    assert stalled.stats().fenced == 1 and stalled.stats().published == 0
    [record] = _events(caplog, "relay.publish.fenced")
    assert (record.levelname, record.count) == ("WARNING", 2)
    assert other.stats().published == 2
    assert keys(driver) == ["receipt:1", "receipt:2"]
    assert len(driver.job_list(ListFilter(limit=100))) == 2


def test_a_pass_over_a_backlog_yields_to_the_host_loop_and_comes_back_at_once(driver, receipt):
    stage_many(None, receipt, [{"order": n} for n in range(5)], driver=driver)
    ticks = iter(range(0, 100_000, 600))                # each look at the clock: 600 ms later
    role = OutboxRelay(driver=driver, identity="relay-1", batch=1, poll=60_000, clock=lambda: float(next(ticks)))
    role.initialize()
    assert role.publish() == 0.0                        # a backlog is left: next pass at once
    assert role.stats().published == 2 and len(keys(driver)) == 2
    role.stop_accepting()                               # the drain is heard between passes
    role.run_once(1e12)
    assert len(keys(driver)) == 2
    role.close()


def test_a_drained_relay_starts_no_pass(driver, receipt):
    stage(None, receipt, {"order": 1}, driver=driver)
    role = relay(driver)
    role.stop_accepting()
    role.run_once(1e12)
    assert keys(driver) == []
    role.close()


@pytest.mark.postgres
def test_only_a_committed_transaction_stages_and_the_relay_wakes_on_it(pg_driver, pg_dsn, receipt):
    role = OutboxRelay(driver=pg_driver, identity="relay-1", poll=3_600_000)
    role.initialize()
    role.run_once(0.0)                               # the first pass; the next is an hour away
    with psycopg.connect(pg_dsn) as conn:
        with conn.transaction():
            stage(conn, receipt, {"order": 1}, driver=pg_driver)
        with pytest.raises(RuntimeError), conn.transaction():
            stage(conn, receipt, {"order": 2}, driver=pg_driver)
            assert pg_driver.outbox_summary().pending == 1     # only the committed row: the open one is invisible outside
            raise RuntimeError("the application's transaction fails")
    deadline = time.monotonic() + 10

    def published() -> bool:
        assert time.monotonic() < deadline, "the commit's notification never ran a pass"
        return bool(keys(pg_driver))
    # its passes wait on the listener's fd; at 1 ms, long before the poll, only a notification publishes
    drive(role, until=published, clock=lambda: 1.0)
    assert keys(pg_driver) == ["receipt:1"]
    assert pg_driver.outbox_summary().pending == 0
    role.close()
