"""The Postgres driver's coalesced ``step_put`` and run ``step_list`` (``pg_step_writes``): the
results and reads that arrive while a batch is on the server go out together in the next, each
caller answered for its own request alone, once it is committed (or refused by its fence)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import pytest

from tests.waiting import wait_for
from xjobs.drivers.base import Claim, Lease, NewJob, StepResult
from xjobs.drivers.pg_step_writes import PgStepWrites
from xjobs.drivers.postgres import PostgresDriver
from xjobs.errors import DriverError

pytestmark = pytest.mark.postgres


class Recording(PgStepWrites):
    """Says how many results each batch carried; ``fail_first`` fails the first batch as a
    deadlock would."""

    def __init__(self, driver: PostgresDriver, fail_first: bool = False, writers: int = 1) -> None:
        super().__init__(driver.database, writers)
        self.batches: list[int] = []
        self.reads: list[int] = []
        self.fail_first = fail_first

    def _write_many(self, batch):
        self.batches.append(len(batch))
        if self.fail_first and len(self.batches) == 1:
            raise DriverError("deadlock detected")
        return super()._write_many(batch)

    def _read_many(self, batch):
        self.reads.append(len(batch))
        return super()._read_many(batch)


def _leases(driver: PostgresDriver, n: int) -> list[Lease]:
    driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key=str(k)) for k in range(n)])
    return [Lease(j.id, j.token) for j in sorted(driver.job_claim(Claim(["q"], n, 60_000, "w")), key=lambda j: j.id)]


def _step(name: str, value: int = 1) -> StepResult:
    return StepResult(name, str(value).encode(), 1, 2.5)


def test_results_that_arrive_during_a_write_go_out_together_each_answered_for_itself(pg_driver, pg_dsn):
    leases = _leases(pg_driver, 21)
    writes = Recording(pg_driver)
    first, rest = leases[0], leases[1:]
    stale = Lease(rest[-1].job_id, rest[-1].token + 1)     # a run that lost its claim
    with ThreadPoolExecutor(max_workers=24) as pool, psycopg.connect(pg_dsn) as blocker:
        # the first batch waits on the first job's row, held here: everything after it queues
        blocker.execute(f"select id from {pg_driver.schema}.jobs where id = %s for update", (first.job_id,))
        blocked = pool.submit(writes.put, first, _step("s1"))
        wait_for(lambda: writes.batches == [1], 10, "the first batch to be under way")
        answers: list[Future[bool]] = [pool.submit(writes.put, lease, _step("s1", k)) for k, lease in
                                       enumerate(rest)]
        fenced = pool.submit(writes.put, stale, _step("s2"))
        wait_for(lambda: writes.waiting == len(rest) + 1, 10, "every later result to wait")
        assert not blocked.done() and not any(a.done() for a in answers)
        blocker.commit()
        assert blocked.result(10) and all(a.result(10) for a in answers)
        assert fenced.result(10) is False
    assert writes.batches == [1, len(rest) + 1]
    rows = pg_driver.step_list(rest[3].job_id).steps
    assert [(s.name, s.state, s.result) for s in rows] == [("s1", "completed", 3)]
    assert [s.name for s in pg_driver.step_list(stale.job_id).steps] == ["s1"]
    # a step already recorded is not written again, and says so
    assert writes.put(first, _step("s1", 9)) is False
    assert pg_driver.step_list(first.job_id).steps[0].result == 1


def test_a_batch_the_server_refuses_is_written_again_one_result_at_a_time(pg_driver):
    [mine, theirs] = _leases(pg_driver, 2)
    writes = Recording(pg_driver, fail_first=True)
    gate = threading.Barrier(2)

    def put(lease: Lease) -> bool:
        gate.wait(10)
        return writes.put(lease, _step("s1"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        ok, fenced = pool.submit(put, mine), pool.submit(put, Lease(theirs.job_id, theirs.token + 1))
        assert ok.result(10) is True and fenced.result(10) is False
    assert writes.batches[0] >= 1
    assert [s.name for s in pg_driver.step_list(mine.job_id).steps] == ["s1"]
    assert pg_driver.step_list(theirs.job_id).steps == ()


def test_steps_never_wait_on_a_body_holding_its_transaction(pg_dsn, pg_schema, clock):
    """A body in ``ctx.transaction()`` holds its connection for its whole run; the other runs'
    steps go on over their own pool, whose size the slots do not set."""
    driver = PostgresDriver(pg_dsn, schema=pg_schema, clock=clock, pool_size=1, step_pool_size=1,
                            transaction_pool_size=1, pool_timeout=2.0)
    try:
        driver.migrate()
        held, other = _leases(driver, 2)
        with driver.job_transaction(held):
            assert driver.step_put(other, _step("s1")) is True
            assert [s.name for s in driver.step_list(other.job_id).steps] == ["s1"]
        assert driver.job_stats() == {"q": {"completed": 1, "running": 1}}
    finally:
        driver.close()


def test_reads_that_arrive_during_a_write_go_out_in_one_statement_each_answered_with_its_own_steps(
        pg_driver, pg_dsn):
    leases = _leases(pg_driver, 6)
    first, rest = leases[0], leases[1:]
    for k, lease in enumerate(rest[:3]):
        assert pg_driver.step_put(lease, _step(f"done{k}", k))
    writes = Recording(pg_driver)
    with ThreadPoolExecutor(max_workers=8) as pool, psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"select id from {pg_driver.schema}.jobs where id = %s for update", (first.job_id,))
        blocked = pool.submit(writes.put, first, _step("s1"))
        wait_for(lambda: writes.batches == [1], 10, "the first batch to be under way")
        logs = [pool.submit(writes.read, lease.job_id) for lease in rest]
        wait_for(lambda: writes.waiting == len(rest), 10, "every read to wait")
        blocker.commit()
        assert blocked.result(10) is True
        answered = [log.result(10) for log in logs]
    assert writes.reads == [len(rest)]
    assert [[(s.name, s.result) for s in log.steps] for log in answered] == [
        [("done0", 0)], [("done1", 1)], [("done2", 2)], [], []]


def test_with_two_writers_a_batch_stuck_on_a_lock_holds_up_no_other(pg_driver, pg_dsn):
    [stuck, *rest] = _leases(pg_driver, 5)
    writes = Recording(pg_driver, writers=2)
    with ThreadPoolExecutor(max_workers=8) as pool, psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"select id from {pg_driver.schema}.jobs where id = %s for update", (stuck.job_id,))
        blocked = pool.submit(writes.put, stuck, _step("s1"))
        wait_for(lambda: writes.batches == [1], 10, "the stuck batch to be under way")
        # the second writer serves everything else, batch after batch, while the first waits
        for lease in rest:
            assert pool.submit(writes.put, lease, _step("s1")).result(10) is True
        assert not blocked.done()
        blocker.commit()
        assert blocked.result(10) is True
    assert writes.batches == [1] * 5 and writes.waiting == 0
    assert all([s.name for s in pg_driver.step_list(lease.job_id).steps] == ["s1"] for lease in [stuck, *rest])


def test_many_runs_stepping_at_once_each_get_every_step_recorded_once(pg_driver):
    """Hand-overs under contention: every request is in exactly one batch, and no writer's
    turn is lost (a later put still goes out at once)."""
    leases = _leases(pg_driver, 48)
    writes = Recording(pg_driver, writers=2)

    def run(lease: Lease) -> list[bool]:
        answers = []
        for n in range(3):
            assert writes.read(lease.job_id).steps == () or n > 0
            answers.append(writes.put(lease, _step(f"s{n}", n)))
        return answers

    with ThreadPoolExecutor(max_workers=48) as pool:
        assert all(all(a) for a in pool.map(run, leases))
    assert sum(writes.batches) == 3 * len(leases) and sum(writes.reads) == 3 * len(leases)
    for lease in leases:
        assert [(s.name, s.result) for s in pg_driver.step_list(lease.job_id).steps] == [
            ("s0", 0), ("s1", 1), ("s2", 2)]
    assert writes.waiting == 0 and writes.put(leases[0], _step("last")) is True


class _Instant(PgStepWrites):
    """Batches answered at once, with no database: only the hand-overs between callers."""

    def __init__(self) -> None:
        super().__init__(type("Db", (), {"step_pool_size": 2})(), writers=2)

    def _write_many(self, batch):
        for pending in batch:
            pending.written = True


def test_every_caller_is_woken_when_a_batch_is_handed_over_before_it_waits():
    """A caller may be handed the next batch between joining the list and starting to wait;
    its wait must still take exactly the one wake-up it was given. Threads switched as often
    as the interpreter allows make that window common."""
    import sys
    writes, done = _Instant(), []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        def caller(k: int) -> None:
            for n in range(300):
                assert writes.put(Lease(k, 1), _step(f"s{n}")) is True
            done.append(k)
        threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(32)]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(done) == 32 or not any(t.is_alive() for t in threads), 60, "every caller answered")
    finally:
        sys.setswitchinterval(interval)
    assert sorted(done) == list(range(32)) and writes.waiting == 0
