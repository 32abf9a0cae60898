"""The battery's application side: what it enqueues, stages and sends, and what it watches.

``Producer`` is the application: one thread, paced at ``rate`` operations a second, choosing
each operation by the seed from the mix below, against PostgreSQL directly (not through the
proxy: the faults are the daemons'; the application only suffers the server's restarts and
the connection hog, and then retries). It keeps a ``Ledger`` of what it did: the ids it was
answered, what it rolled back, the events it sent.

=================  ===========================================================================
operation          what
=================  ===========================================================================
plain              ``plain.enqueue``; some delayed (they must not start early)
plain-in-txn       ``plain.enqueue(conn=)`` as the FIRST statement of a fresh connection's
                   transaction, then commit or (a third of them) rollback: a rolled-back job
                   must never exist
tx                 ``tx_effect``: its effect and its completion commit together
five               ``five_steps``; its event is sent 0.2-6 s later, sometimes after a decoy
                   sent with ``send_event(conn=)`` on a fresh connection and rolled back
outbox             one to three ``outbox.stage`` rows (the first statement of a fresh
                   connection's transaction) and a row in ``app.staged``, in one transaction;
                   a quarter roll back
capped, tenanted   ``job(concurrency=3)`` and the per-tenant limited job
=================  ===========================================================================

``Watcher`` receives the ``capped``/``tenanted`` bodies' enter and exit datagrams and, at every
enter and every 100 ms, counts the bodies running: entered, not exited, in a process that is
alive and not stopped (a SIGSTOPped body runs nothing). More than 3 ``capped`` bodies in the
fleet, or more than the tenant limit of one tenant in one worker process, is a violation,
recorded with the job ids.
"""

from __future__ import annotations

import heapq
import os
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg

import faults_app
import xjobs.outbox
from faults_fleet import TENANT_LIMIT, pid_state
from xjobs import send_event
from xjobs.drivers.postgres import PostgresDriver

MIX = (("plain", 26), ("plain-in-txn", 6), ("tx", 20), ("five", 10), ("outbox", 14), ("capped", 10),
       ("tenanted", 14))
CAP = 3


@dataclass
class Ledger:
    """What the application did; written to ``app.*`` tables at the end for the checks."""
    enqueued: list[tuple[int, str, int]] = field(default_factory=list)     # (job id, name, n)
    ghosts: list[tuple[str, int]] = field(default_factory=list)            # (what, n) rolled back
    five: dict[int, float] = field(default_factory=dict)                  # n -> when its event is due
    sent: dict[int, float] = field(default_factory=dict)                  # n -> when its event was sent
    decoys: int = 0
    staged_rows: int = 0
    failures: dict[str, int] = field(default_factory=dict)                # operation -> failed attempts
    ops: dict[str, int] = field(default_factory=dict)

    def failed(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1


class Producer(threading.Thread):
    def __init__(self, *, dsn: str, rate: float, rng: random.Random) -> None:
        super().__init__(name="faults-producer", daemon=True)
        self.dsn = dsn
        self.rate = rate
        self.rng = rng
        self.ledger = Ledger()
        self.driver = PostgresDriver(dsn, schema="xjobs", pool_size=2, application_name="faults-app")
        xjobs.configure(driver=self.driver, dsn=dsn, schema="xjobs")
        self.enqueueing = threading.Event()
        self.enqueueing.set()
        self.stopping = threading.Event()
        self._n = 0
        self._events: list[tuple[float, int, bool]] = []   # (due, n, decoy first)
        self.error: BaseException | None = None

    def next_n(self) -> int:
        self._n += 1
        return self._n

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            kinds, weights = zip(*MIX)
            tick = 1.0 / self.rate
            while not self.stopping.is_set():
                began = time.monotonic()
                if self.enqueueing.is_set():
                    self._attempt(self.rng.choices(kinds, weights)[0])
                self._send_due_events()
                self.stopping.wait(max(0.0, tick - (time.monotonic() - began)))
        except BaseException as exc:     # reported by the battery, never lost in the thread
            self.error = exc

    def _attempt(self, op: str) -> None:
        self.ledger.ops[op] = self.ledger.ops.get(op, 0) + 1
        try:
            getattr(self, "_" + op.replace("-", "_"))(self.next_n())
        except (psycopg.Error, OSError, xjobs.XJobsError):
            self.ledger.failed(op)       # the server was away: the next operation tries again

    def events_pending(self) -> int:
        return len(self._events)

    def _record(self, name: str, n: int, enqueued: Any) -> None:
        self.ledger.enqueued.append((enqueued.id, name, n))

    # -- operations ----------------------------------------------------------------------------------

    def _plain(self, n: int) -> None:
        payload: dict[str, Any] = {"n": n, "ms": self.rng.randint(5, 200)}
        delay = None
        if self.rng.random() < 0.2:
            payload["delay_ms"] = self.rng.randint(500, 3000)
            delay = f"{payload['delay_ms']}ms"
        self._record("plain", n, faults_app.plain.enqueue(payload, delay=delay))

    def _fresh(self) -> psycopg.Connection:
        """A new connection, in no transaction yet (the trap for a verb taking ``conn=``)."""
        return psycopg.connect(self.dsn, autocommit=False, application_name="faults-app", connect_timeout=5)

    def _plain_in_txn(self, n: int) -> None:
        rollback = self.rng.random() < 0.33
        with self._fresh() as conn:
            enqueued = faults_app.plain.enqueue({"n": n, "ms": 10}, conn=conn)   # the first statement
            conn.execute("select 1")
            if rollback:
                conn.rollback()
                self.ledger.ghosts.append(("plain", n))
                return
            conn.commit()
        self._record("plain", n, enqueued)

    def _tx(self, n: int) -> None:
        payload = {"n": n, "ms": self.rng.randint(5, 150), "hold_ms": self.rng.randint(5, 80)}
        self._record("tx_effect", n, faults_app.tx_effect.enqueue(payload))

    def _five(self, n: int) -> None:
        payload = {"n": n, "nap_ms": self.rng.randint(300, 3000)}
        self._record("five_steps", n, faults_app.five_steps.enqueue(payload))
        due = time.monotonic() + self.rng.uniform(0.2, 6.0)
        self.ledger.five[n] = due
        heapq.heappush(self._events, (due, n, self.rng.random() < 0.15))

    def _outbox(self, n: int) -> None:
        ns = [n] + [self.next_n() for _ in range(self.rng.randint(0, 2))]
        rollback = self.rng.random() < 0.25
        with self._fresh() as conn:
            ids = xjobs.outbox.stage_many(conn, faults_app.outboxed,
                                          [{"n": k, "ms": self.rng.randint(5, 100)} for k in ns])
            with conn.cursor() as cur:
                cur.executemany("insert into app.staged (n, outbox_id) values (%s, %s)", list(zip(ns, ids)))
            if rollback:
                conn.rollback()
                self.ledger.ghosts.extend(("outboxed", k) for k in ns)
                return
            conn.commit()
        self.ledger.staged_rows += len(ns)

    def _capped(self, n: int) -> None:
        self._record("capped", n, faults_app.capped.enqueue({"n": n, "ms": self.rng.randint(100, 800)}))

    def _tenanted(self, n: int) -> None:
        self._record("tenanted", n, faults_app.tenanted.enqueue({"n": n, "ms": self.rng.randint(100, 600)}))

    # -- events ----------------------------------------------------------------------------------------

    def _send_due_events(self) -> None:
        now = time.monotonic()
        while self._events and self._events[0][0] <= now:
            due, n, decoy = heapq.heappop(self._events)
            try:
                if decoy:
                    with self._fresh() as conn:    # the send is the transaction's first statement
                        send_event("fault.paid", key=f"five-{n}", payload={"amount": -n, "decoy": True}, conn=conn)
                        conn.rollback()
                    self.ledger.decoys += 1
                    heapq.heappush(self._events, (now + self.rng.uniform(0.2, 2.0), n, False))
                    continue
                send_event("fault.paid", key=f"five-{n}", payload={"amount": n}, driver=self.driver)
                self.ledger.sent[n] = time.time()
            except (psycopg.Error, OSError, xjobs.XJobsError):
                self.ledger.failed("event")
                heapq.heappush(self._events, (now + 1.0, n, decoy))
                return

    def close(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(30)
        self.driver.close()


@dataclass
class Violation:
    at: float
    what: str
    jobs: list[int]


class Watcher(threading.Thread):
    """Bodies running now, from their datagrams (see the module doc)."""

    def __init__(self, path: str) -> None:
        super().__init__(name="faults-watcher", daemon=True)
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.live: dict[str, dict[int, tuple[int, str]]] = {"capped": {}, "tenanted": {}}
        self.violations: list[Violation] = []
        self.peak = {"capped": 0, "tenanted": 0}
        self.entered = {"capped": 0, "tenanted": 0}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                self._check()
                continue
            except OSError:
                return
            what, name, job, pid, tenant = data.decode().split()
            bodies = self.live.setdefault(name, {})
            if what == "enter":
                bodies[int(job)] = (int(pid), tenant)
                self.entered[name] = self.entered.get(name, 0) + 1
                self._check()
            else:
                bodies.pop(int(job), None)

    def _running(self, name: str) -> dict[int, tuple[int, str]]:
        """The bodies of ``name`` whose process is alive and not stopped; forgets the dead."""
        out = {}
        bodies = self.live[name]
        for job, (pid, tenant) in list(bodies.items()):
            state = pid_state(pid)
            if state is None or state in ("Z", "X"):
                bodies.pop(job, None)
            elif state not in ("T", "t"):
                out[job] = (pid, tenant)
        return out

    def _check(self) -> None:
        capped = self._running("capped")
        self.peak["capped"] = max(self.peak["capped"], len(capped))
        if len(capped) > CAP:
            self._violate(f"{len(capped)} capped bodies running at once (cap {CAP})", sorted(capped))
        per: dict[tuple[int, str], list[int]] = {}
        for job, key in self._running("tenanted").items():
            per.setdefault(key, []).append(job)
        for (pid, tenant), jobs in per.items():
            self.peak["tenanted"] = max(self.peak["tenanted"], len(jobs))
            if len(jobs) > TENANT_LIMIT:
                self._violate(f"{len(jobs)} bodies of tenant {tenant} at once in process {pid} "
                              f"(limit {TENANT_LIMIT})", sorted(jobs))

    def _violate(self, what: str, jobs: list[int]) -> None:
        last = self.violations[-1] if self.violations else None
        if last is None or last.what != what or last.jobs != jobs:    # one record per situation
            self.violations.append(Violation(time.time(), what, jobs))

    def close(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def retrying(fn: Callable[[], Any], *, deadline: float, every: float = 0.5) -> Any:
    """``fn()`` until it stops failing on the database (a restart, the hog) or ``deadline``."""
    while True:
        try:
            return fn()
        except (psycopg.Error, OSError, xjobs.XJobsError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(every)
