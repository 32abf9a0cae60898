"""A cancel tells the worker running the job, on both drivers: a holder's listener hears the
cancels of its own running jobs by id (one cancel, or a bulk one: once per holder per batch, by
name while they fit a notification), and nothing of anybody else's; a job that was not running
tells nobody. On Postgres the notification is part of the cancel's transaction, and a listener
whose connection was cut asks its worker to check every run once it listens again."""

from __future__ import annotations

import select
import time

import psycopg
import pytest

from tests.drivers.parity import claim, enqueue
from tests.waiting import wait_for
from xjobs.admin import cancel_jobs
from xjobs.drivers.base import Cancels, JobListener, ListFilter
from xjobs.drivers.records import CANCEL_NAMED


def hear(listener: JobListener, until, timeout: float = 10.0) -> Cancels:
    """Everything ``listener`` heard, gathered over its polls until ``until(heard)``."""
    ids: set[int] = set()
    every = False
    deadline = time.monotonic() + timeout
    while True:
        listener.poll()
        got = listener.cancels()
        ids |= got.ids
        every = every or got.every
        heard = Cancels(frozenset(ids), every)
        if until(heard):
            return heard
        fd = listener.fileno()
        assert fd is not None, f"memory tells at once; heard {heard}"
        assert time.monotonic() < deadline, f"timed out; heard {heard}"
        select.select([fd], [], [], 0.5)


def running(driver, holder: str, *keys: str, queue: str = "default") -> list[int]:
    ids = [enqueue(driver, key, queue=queue) for key in keys]
    got = claim(driver, queue, limit=len(keys), worker=holder)
    assert sorted(j.id for j in got) == sorted(ids)
    return ids


def test_the_holder_hears_the_cancel_of_its_running_job_and_nobody_else_does(driver):
    mine, theirs, deaf = driver.job_listen("w1"), driver.job_listen("w2"), driver.job_listen()
    try:
        [a] = running(driver, "w1", "a")
        [b] = running(driver, "w2", "b")
        ready = enqueue(driver, "c")
        driver.job_cancel(ready, "not running: nobody to tell")
        driver.job_cancel(a, "operator")
        driver.job_cancel(b, "operator")   # after a: once w2 heard b, w1's note was there before it
        assert hear(theirs, lambda h: b in h.ids) == Cancels(frozenset({b}))
        assert hear(mine, lambda h: a in h.ids) == Cancels(frozenset({a}))
        deaf.poll()
        assert not deaf.cancels()
        assert not mine.cancels()          # asking again hands over nothing twice
    finally:
        for listener in (mine, theirs, deaf):
            listener.close()


def test_a_bulk_cancel_tells_each_holder_its_jobs_once_per_batch(driver):
    mine, theirs = driver.job_listen("w1"), driver.job_listen("w2")
    try:
        a = running(driver, "w1", "a1", "a2", "a3")
        b = running(driver, "w2", "b1")
        enqueue(driver, "ready")
        result = cancel_jobs(driver, ListFilter(queue="default"), by="test", batch=3)
        assert (result.changed, result.batches) == (5, 2)
        assert hear(mine, lambda h: h.ids >= set(a)) == Cancels(frozenset(a))
        assert hear(theirs, lambda h: h.ids >= set(b)) == Cancels(frozenset(b))
    finally:
        mine.close()
        theirs.close()


def test_a_batch_with_more_running_jobs_than_a_notification_names_asks_for_every_run(driver):
    listener = driver.job_listen("w1")
    try:
        keys = [f"k{n}" for n in range(CANCEL_NAMED + 1)]
        running(driver, "w1", *keys)
        cancel_jobs(driver, ListFilter(queue="default"), by="test", batch=1000)
        assert hear(listener, lambda h: h.every) == Cancels(frozenset(), True)
    finally:
        listener.close()


@pytest.mark.postgres
def test_a_bulk_cancel_sends_one_notification_per_holder_per_batch(pg_driver):
    with psycopg.connect(pg_driver.dsn, autocommit=True) as conn:
        conn.execute(f"listen {pg_driver.channel}_cancel")
        for holder in ("w1", "w2"):
            running(pg_driver, holder, *[f"{holder}-{n}" for n in range(4)])
        cancel_jobs(pg_driver, ListFilter(queue="default"), by="test", batch=1000)
        pg_driver.job_cancel(enqueue(pg_driver, "marker"), "ready: not told")
        [last] = running(pg_driver, "w3", "last")
        pg_driver.job_cancel(last, "the last one told")
        notes = []
        for note in conn.notifies(timeout=10):
            notes.append(note.payload)
            if '"w3"' in note.payload:
                break
    assert len(notes) == 3, notes          # w1 and w2 once each for their four, then w3


@pytest.mark.postgres
def test_a_cancel_that_rolls_back_tells_nobody(pg_driver):
    listener = pg_driver.job_listen("w1")
    try:
        [a] = running(pg_driver, "w1", "a")
        [b] = running(pg_driver, "w1", "b")
        sql = pg_driver.database.sql["job_cancel"]
        with psycopg.connect(pg_driver.dsn) as conn:   # a transaction that never commits
            conn.execute(sql, {**pg_driver.database.now(), "channel": pg_driver.database.cancel_channel,
                               "holder_bytes": 1000, "id": a, "reason": "rolled back"})
            conn.rollback()
        pg_driver.job_cancel(b, "committed")
        assert hear(listener, lambda h: b in h.ids) == Cancels(frozenset({b}))
        assert pg_driver.job_get(a).state == "running"
    finally:
        listener.close()


@pytest.mark.postgres
def test_a_listener_whose_connection_was_cut_asks_for_every_run_once_it_listens_again(pg_driver):
    listener = pg_driver.job_listen("w1")
    try:
        channel = pg_driver.database.cancel_channel
        # this listener's own session: other listeners of the same schema (another test's, on
        # this test process's schema) ran the same LISTEN, so its text names no one session
        assert listener._conn is not None
        pid = listener._conn.info.backend_pid
        with psycopg.connect(pg_driver.dsn, autocommit=True) as conn:
            conn.execute("select pg_terminate_backend(%s)", (pid,))
        def reopened() -> Cancels | None:
            listener.poll()   # finds the connection gone, then reopens it a second later
            return listener.cancels() or None
        heard = wait_for(reopened, 30, "the reopened listener's check")   # a failed reopen retries after 5 s
        assert heard == Cancels(frozenset(), True)
        [a] = running(pg_driver, "w1", "a")   # and it hears cancels again
        pg_driver.job_cancel(a, "after the cut")
        assert hear(listener, lambda h: a in h.ids).ids == {a}
    finally:
        listener.close()
