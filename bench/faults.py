"""The fault battery: a mixed workload on two ``xjobsd`` supervisors under randomized faults,
ending with invariants checked in SQL. Reproducible by ``--seed``: the same seed replays the
same faults, with the same choices, in the same order (and the same workload mix).

    python bench/faults.py [--seed N] [--minutes 30 | --duration 60] [--faults KIND,...] [--rate 15]

Everything runs on a PRIVATE PostgreSQL cluster (``faults_cluster``: initdb into a temporary
directory, its own port), removed at the end, also on failure or Ctrl-C; no other server is
touched. Each daemon reaches it through a TCP proxy of its own (``faults_proxy``) that can
stall and reset its connections, so one daemon can be cut off while the other runs on; the
application side (``faults_workload``) connects directly.

The run, in phases:

1. **start**: the cluster, the schema, the proxies, supervisors ``a`` and ``b`` (``faults_fleet``),
   the producer and the watcher; a few seconds of workload without faults (warm-up);
2. **faults**, one at a time until the duration is spent: a kind drawn from a shuffled deck
   of every available kind (so a run covers every kind before repeating one), injected and
   lifted (``faults_kinds``), then RECOVERY is waited for: every child of every supervisor
   ready, a scheduler leading, a canary job enqueued and one staged in the outbox after the
   lift both completed, and a cron tick dispatched after the lift. "recovered in" is the time
   from the lift to all of that; a fault not recovered within ``--recovery-deadline`` fails;
3. **quiet**: no more faults or new jobs; the events still due are sent; the workload must
   settle (every job completed or dead, the outbox empty) within ``--settle``; then no job may
   be ``running`` under a holder that is not a live child of a supervisor;
4. **drain**: SIGTERM to every supervisor; each must exit 0;
5. **checks**: the invariants of ``faults_checks`` in SQL, plus what the battery watched: never
   more than 3 ``capped`` bodies running in the fleet, never more than the tenant limit of one
   tenant in one worker process, every drain exiting 0, every fault recovered.

It prints one table per fault kind (injected, recovered in, suspects cleared, lost, doubles,
lapsed, quarantined) and one line per invariant, with the offending ids when it fails, and
exits 1 when any failed. ``doubles`` are bodies that ran again (at-least-once: allowed,
counted); ``lapsed`` jobs whose lease ran out and were charged the attempt; ``quarantined``
jobs marked crash suspects. The logs of every daemon and of the server are kept in ``--logs``
(default: a temporary directory, kept and printed when the run fails).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import psycopg  # noqa: E402

import faults_app  # noqa: E402
import faults_checks  # noqa: E402
import xjobs.outbox  # noqa: E402
from faults_cluster import Cluster  # noqa: E402
from faults_fleet import LEASE_S, Supervisor  # noqa: E402
from faults_kinds import KINDS, Kind  # noqa: E402
from faults_proxy import Proxy  # noqa: E402
from faults_workload import Producer, Watcher, retrying  # noqa: E402
from xjobs.drivers.postgres import PostgresDriver  # noqa: E402
from xjobs.enqueue import enqueue_many  # noqa: E402

LIVE = faults_checks.LIVE


@dataclass
class Injection:
    seq: int
    kind: str
    injected_at: float          # wall clock (the server's too: one machine)
    lifted_at: float = 0.0
    detail: str = ""
    recovered_s: float | None = None
    cleared_s: float | None = None   # until no crash suspect waited any more (they run alone)


class Battery:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed = args.seed
        self.duration = args.duration
        self.scale = min(1.0, max(0.1, self.duration / 900.0))
        self.faults_rng = random.Random(f"faults:{self.seed}")
        self.work_rng = random.Random(f"work:{self.seed}")
        self.logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="xjobs-faults-"))
        self.logs.mkdir(parents=True, exist_ok=True)
        self.stop = threading.Event()
        self.injections: list[Injection] = []
        self.problems: list[tuple[str, str]] = []      # (invariant, what) seen by the battery itself
        self.orphan_waits: list[float] = []
        self.cluster: Cluster = None  # type: ignore[assignment]
        self.proxies: list[Proxy] = []
        self.fleet: list[Supervisor] = []
        self.producer: Producer | None = None
        self.watcher: Watcher | None = None
        self.watch: PostgresDriver | None = None
        self._canary = 10**9
        self.t0 = time.monotonic()

    # -- helpers the kinds use -----------------------------------------------------------------------

    def hold(self, seconds: float) -> None:
        """Pace a fault (its hold is the fault); Ctrl-C still ends the run at once."""
        if self.stop.wait(max(0.0, seconds)):
            raise KeyboardInterrupt

    def wait(self, condition: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
        end = time.monotonic() + timeout
        while True:
            value = condition()
            if value or time.monotonic() >= end:
                return value
            self.hold(every)

    def problem(self, invariant: str, what: str) -> None:
        self.problems.append((invariant, what))
        self.say(f"!! {invariant}: {what}")

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {line}", flush=True)

    def sql(self, query: str, *params: Any) -> list[tuple]:
        with self.cluster.session() as conn:
            return conn.execute(query, params or None).fetchall()

    # -- phases --------------------------------------------------------------------------------------

    def start(self) -> None:
        self.cluster = Cluster().start()
        app_dsn = self.cluster.dsn()
        with self.cluster.session(user="xjobs") as conn:
            conn.execute(faults_app.APP_DDL)
        migrator = PostgresDriver(app_dsn, schema="xjobs", pool_size=1, application_name="faults-app")
        migrator.migrate()
        migrator.close()
        self.watch = PostgresDriver(self.cluster.dsn(user="postgres"), schema="xjobs", pool_size=2,
                                    application_name="faults-watch")
        socket_path = str(self.logs / "bodies.sock")
        self.watcher = Watcher(socket_path)
        self.watcher.start()
        for name in ("a", "b"):     # a proxy each: one daemon can be cut off while the other runs on
            proxy = Proxy(("127.0.0.1", self.cluster.port)).start()
            self.proxies.append(proxy)
            self.fleet.append(Supervisor(name, self.cluster.dsn(port=proxy.port), self.logs, socket_path, proxy))
        for sup in self.fleet:
            sup.start()
        for sup in self.fleet:
            sup.wait_ready(90)
        self.producer = Producer(dsn=app_dsn, rate=self.args.rate, rng=self.work_rng)
        self.producer.start()
        self.say(f"cluster on port {self.cluster.port} ({self.cluster.bindir}); supervisors "
                 + " and ".join(f"{sup.name} (pid {sup.current.pid}, through a proxy on port {sup.proxy.port})"
                                for sup in self.fleet) + " ready")

    def kinds(self) -> list[Kind]:
        wanted = None if self.args.faults == "all" else set(self.args.faults.split(","))
        unknown = (wanted or set()) - {k.name for k in KINDS}
        if unknown:
            raise SystemExit(f"unknown fault kind(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(k.name for k in KINDS)}")
        chosen = []
        for kind in KINDS:
            if wanted is not None and kind.name not in wanted:
                continue
            reason = kind.unavailable(self)
            if reason:
                self.say(f"skipping {kind.name}: {reason}")
            else:
                chosen.append(kind)
        return chosen

    def run_faults(self) -> None:
        kinds = self.kinds()
        self.hold(self.args.warmup)
        end = time.monotonic() + self.duration     # faults are injected for this long
        deck: list[Kind] = []
        while kinds and time.monotonic() < end:
            if not deck:
                deck = list(kinds)
                self.faults_rng.shuffle(deck)
            kind = deck.pop()
            inj = Injection(len(self.injections) + 1, kind.name, time.time())
            self.injections.append(inj)
            try:
                inj.detail = kind.run(self, self.faults_rng)
            except (psycopg.Error, OSError, RuntimeError) as exc:
                inj.detail = f"the fault itself failed: {type(exc).__name__}: {exc}"
            inj.lifted_at = time.time()
            lifted = time.monotonic()
            inj.recovered_s = self.recover(self.args.recovery_deadline)
            recovered_at = time.monotonic()
            if inj.recovered_s is not None:
                inj.cleared_s = self.suspects_cleared(lifted, self.args.recovery_deadline)
            took = "NOT recovered" if inj.recovered_s is None else f"recovered in {inj.recovered_s:.2f} s"
            if inj.recovered_s is not None:
                took += (f", suspects cleared in {inj.cleared_s:.2f} s" if inj.cleared_s is not None
                         else ", crash suspects still waiting")
            self.say(f"#{inj.seq} {kind.name}: {inj.detail}; {took}")
            if inj.recovered_s is None:
                self.problem("every fault recovered", f"#{inj.seq} {kind.name} not recovered within "
                                                     f"{self.args.recovery_deadline:g} s of its lift")
            elif inj.cleared_s is None:
                self.problem("every fault recovered", f"#{inj.seq} {kind.name}: crash suspects still waiting "
                                                     f"{self.args.recovery_deadline:g} s after its lift")
            # the next fault comes a lease and a rescue after this one's recovery (the suspects'
            # watch is part of that wait), so what this one causes later (a lease that lapses,
            # its rescue) is counted in its own window
            gap = self.faults_rng.uniform(LEASE_S + 2.0, LEASE_S + 5.0)
            self.hold(gap - (time.monotonic() - recovered_at))

    def recover(self, deadline_s: float) -> float | None:
        """Seconds from now (the lift) until the fleet works again (see the module doc)."""
        began = time.monotonic()
        end = began + deadline_s
        lifted = time.time()
        assert self.watch is not None
        self._canary += 1
        try:
            job_id = retrying(lambda: enqueue_many(faults_app.canary, [{"n": self._canary}], driver=self.watch)[0].id,
                              deadline=end)
            self._canary += 1
            outbox_id = retrying(lambda: self._stage_canary(self._canary), deadline=end)
        except (psycopg.Error, OSError, xjobs.XJobsError):
            return None

        def healthy() -> bool:
            if not all(sup.ready() for sup in self.fleet):
                return False
            if not any((c.get("stats") or {}).get("leader") for sup in self.fleet for c in sup.children()
                       if c["role"] == "scheduler"):
                return False
            try:
                row = self.sql("""select (select state from xjobs.jobs where id = %s),
                                         (select j.state from xjobs.outbox o join xjobs.jobs j on j.id = o.job_id
                                          where o.id = %s),
                                         exists (select 1 from xjobs.jobs where name = 'tick'
                                                 and created_at > to_timestamp(%s))""",
                               job_id, outbox_id, lifted)[0]
            except psycopg.Error:
                return False
            return row[0] == "completed" and row[1] == "completed" and bool(row[2])
        if self.wait(healthy, max(0.0, end - time.monotonic()), every=0.2):
            return time.monotonic() - began
        return None

    def suspects_cleared(self, lifted: float, deadline_s: float) -> float | None:
        """Seconds from the lift until the last crash suspect waiting or running was seen
        (0: none), watched for at least a lease and a rescue (leases that lapse make suspects
        that late) and then while any is left: each runs alone, so a fault that made many is
        recovered from only when they have all run. None when some still wait at the deadline."""
        last_seen = lifted
        floor = lifted + LEASE_S + 2.0
        end = lifted + deadline_s
        while True:
            try:
                waiting = bool(self.sql("select exists (select 1 from xjobs.jobs where crashes > 0 "
                                        "and state in ('ready', 'running'))")[0][0])
            except psycopg.Error:
                waiting = True
            now = time.monotonic()
            if waiting:
                last_seen = now
            elif now >= floor:
                return last_seen - lifted
            if now >= end:
                return None
            self.hold(0.2)

    def _stage_canary(self, n: int) -> int:
        with psycopg.connect(self.cluster.dsn(user="postgres"), application_name="faults-watch",
                             connect_timeout=5) as conn:
            outbox_id = xjobs.outbox.stage(conn, faults_app.canary, {"n": n}, driver=self.watch)
            conn.commit()
        return outbox_id

    def settle(self) -> float:
        """Quiet: no new work, the due events sent, everything settled; answers when."""
        assert self.producer is not None
        self.producer.enqueueing.clear()
        deadline = time.monotonic() + self.args.settle
        names = faults_checks.WORK_SQL

        def settled() -> bool:
            if self.producer.events_pending():
                return False
            try:
                live, pending = self.sql(f"select (select count(*) from xjobs.jobs where state in {LIVE} "
                                         f"and name in {names}), (select count(*) from xjobs.outbox "
                                         f"where published_at is null)")[0]
            except psycopg.Error:
                return False
            return live == 0 and pending == 0
        ok = self.wait(settled, max(0.0, deadline - time.monotonic()), every=0.5)
        settled_at = time.time()
        if ok:
            # the ticks dispatched before now must finish too (they are checked; later ones are not)
            def ticks_done() -> bool:
                try:
                    return bool(self.sql(f"select count(*) = 0 from xjobs.jobs where name = 'tick' and state in "
                                         f"{LIVE} and created_at < to_timestamp(%s)", settled_at)[0][0])
                except psycopg.Error:
                    return False
            self.wait(ticks_done, max(0.0, deadline - time.monotonic()), every=0.5)
        self.say(f"quiet: the workload {'settled' if ok else 'did NOT settle'} "
                 f"{time.time() - self.quiet_at:.1f} s after the last fault")
        self.check_holders()
        return settled_at

    def check_holders(self) -> None:
        def answered() -> list[Any] | None:
            found = [sup.status() for sup in self.fleet]
            return found if all(status is not None for status in found) else None
        statuses = self.wait(answered, 10.0, every=0.2)
        if not statuses:
            self.problem("no job running without a live holder", "a supervisor did not answer its status")
            return
        holders = {c["identity"] for status in statuses for c in status.get("children", []) if c.get("identity")}
        for job_id, name, holder in self.sql("select id, name, claimed_by from xjobs.jobs where state = 'running'"):
            if holder not in holders:
                self.problem("no job running without a live holder",
                             f"job {job_id} ({name}) is running under {holder}, which is no live child")

    def drain(self) -> None:
        for sup in self.fleet:
            sup.terminate()
        for sup in self.fleet:
            code = sup.drain()
            self.say(f"final drain: supervisor {sup.name} (pid {sup.current.pid}) exited {code}")

    # -- the verdict ---------------------------------------------------------------------------------

    def verdict(self, settled_at: float) -> bool:
        assert self.producer is not None and self.watcher is not None
        ledger = self.producer.ledger
        windows = self._windows()
        with self.cluster.session() as conn:
            faults_checks.write_evidence(conn, ledger=ledger.enqueued, ghosts=ledger.ghosts,
                                         windows=[(w[0], w[1], w[2], w[3]) for w in windows], settled_at=settled_at)
            results = faults_checks.check(conn)
            per = faults_checks.per_window(conn)
            totals = faults_checks.totals(conn)
            verdicts = faults_checks.dead_verdicts(conn)

        for gen in (g for sup in self.fleet for g in sup.generations):
            if gen.ended == "died":
                self.problems.append(("every xjobsd exits 0 at a drain", f"pid {gen.pid} exited {gen.exit_code} "
                                                                          f"before it was stopped (log {gen.log})"))
            elif gen.ended == "drained" and gen.exit_code != 0:
                self.problems.append(("every xjobsd exits 0 at a drain", f"pid {gen.pid} exited {gen.exit_code} "
                                                                          f"(log {gen.log})"))
        for v in self.watcher.violations:
            name = "never more than 3 capped bodies" if "capped" in v.what else "per-tenant limit held"
            self.problems.append((name, f"{time.strftime('%H:%M:%S', time.localtime(v.at))} {v.what}: jobs {v.jobs}"))
        if self.producer.error is not None:
            self.problems.append(("the battery itself", f"the producer died: {self.producer.error!r}"))

        self._print_table(windows, per)
        print(f"\nworkload ({self.args.rate:g} operations/s; {sum(ledger.ops.values())} operations, "
              f"{sum(ledger.failures.values())} refused while the server was away):")
        print(f"  {'job':<12}{'jobs':>8}{'completed':>11}{'dead':>6}{'live':>6}{'starts':>8}")
        for name, jobs, done, dead, live, starts in totals:
            print(f"  {name:<12}{jobs:>8}{done:>11}{dead:>6}{live:>6}{starts:>8}")
        print(f"  staged rows committed {ledger.staged_rows}, rolled back (stagings, enqueues) "
              f"{len(ledger.ghosts)}; events sent {len(ledger.sent)}, decoys rolled back {ledger.decoys}")
        print(f"  peak bodies running: capped {self.watcher.peak['capped']} (cap 3, {self.watcher.entered['capped']} "
              f"entries), one tenant in one process {self.watcher.peak['tenanted']} (limit 2)")
        if self.orphan_waits:
            print(f"  children of a SIGKILLed supervisor gone in: max {max(self.orphan_waits):.2f} s")
        if verdicts:
            print("  dead jobs by verdict:")
            for name, verdict, count in verdicts:
                print(f"    {count:>5}  {name}: {verdict}")

        print("\ninvariants:")
        failed = False
        for inv, rows in results:
            failed |= bool(rows)
            print(f"  {'FAIL' if rows else 'ok  '}  {inv.name}: {inv.says}")
            for row in rows[:20]:
                print(f"          {' | '.join(str(v) for v in row)}")
            if len(rows) > 20:
                print(f"          ... and {len(rows) - 20} more")
        battery_side = ("never more than 3 capped bodies", "per-tenant limit held", "no job running without a live holder",
                        "every xjobsd exits 0 at a drain", "every fault recovered", "children outlive their supervisor",
                        "the battery itself")
        for name in battery_side:
            rows = [what for inv, what in self.problems if inv == name]
            failed |= bool(rows)
            print(f"  {'FAIL' if rows else 'ok  '}  {name}")
            for what in rows[:20]:
                print(f"          {what}")
        return not failed

    def _windows(self) -> list[tuple[int, str, float, float]]:
        """(seq, kind, began, ended): warm-up, each fault until the next one, the quiet."""
        out = [(0, "(warm-up)", self.started_at, self.injections[0].injected_at if self.injections else self.quiet_at)]
        for i, inj in enumerate(self.injections):
            ended = self.injections[i + 1].injected_at if i + 1 < len(self.injections) else self.quiet_at
            out.append((inj.seq, inj.kind, inj.injected_at, ended))
        out.append((len(self.injections) + 1, "(quiet, drain)", self.quiet_at, time.time() + 1))
        return out

    def _print_table(self, windows: list[tuple[int, str, float, float]], per: dict[int, dict[str, int]]) -> None:
        print(f"\nxjobs fault battery: seed {self.seed}, {self.duration:g} s, {len(self.injections)} faults "
              f"(reproduce: python bench/faults.py --seed {self.seed} --duration {self.duration:g}"
              f"{'' if self.args.faults == 'all' else ' --faults ' + self.args.faults})")
        print(f"{'fault':<22}{'injected':>9}{'recovered in p50':>18}{'max':>9}{'suspects cleared (max)':>24}"
              f"{'lost':>6}{'doubles':>9}{'lapsed':>8}{'quarantined':>13}")
        order = ["(warm-up)"] + [k.name for k in KINDS] + ["(quiet, drain)"]
        for kind in order:
            seqs = [w[0] for w in windows if w[1] == kind]
            if not seqs:
                continue
            recovered = [i.recovered_s for i in self.injections if i.kind == kind]
            done = [r for r in recovered if r is not None]
            p50 = f"{statistics.median(done):.2f} s" if done else "-"
            worst = "never" if None in recovered else (f"{max(done):.2f} s" if done else "-")
            cleared = [i.cleared_s for i in self.injections if i.kind == kind and i.recovered_s is not None]
            clear = "never" if None in cleared else (f"{max(cleared):.2f} s" if cleared else "-")
            sums = {col: sum(per.get(s, {}).get(col, 0) for s in seqs)
                    for col in ("lost", "doubles", "lapsed", "quarantined")}
            count = "-" if kind.startswith("(") else str(len(seqs))
            print(f"{kind:<22}{count:>9}{p50:>18}{worst:>9}{clear:>24}{sums['lost']:>6}{sums['doubles']:>9}"
                  f"{sums['lapsed']:>8}{sums['quarantined']:>13}")

    # -- the whole run -------------------------------------------------------------------------------

    def run(self) -> int:
        ok = False
        self.started_at = time.time()
        self.quiet_at = self.started_at
        try:
            self.start()
            self.started_at = time.time()
            self.run_faults()
            self.quiet_at = time.time()
            settled_at = self.settle()
            self.producer.close()   # type: ignore[union-attr]
            self.drain()
            ok = self.verdict(settled_at)
            if self.args.inspect:
                self.inspect()
        except KeyboardInterrupt:
            print("\ninterrupted: cleaning up", flush=True)
        finally:
            self.close(keep_logs=not ok or bool(self.args.logs))
        print(f"\n{'PASS' if ok else 'FAIL'}: seed {self.seed}", flush=True)
        return 0 if ok else 1

    def inspect(self) -> None:
        """Keep the cluster up for a look at its tables until Enter or Ctrl-C."""
        print(f"\nthe cluster stays up for inspection: psql '{self.cluster.dsn(user='postgres')}' "
              f"(schemas xjobs and app); press Enter (or Ctrl-C) to remove it", flush=True)
        try:
            input()
        except (EOFError, KeyboardInterrupt):
            pass

    def close(self, keep_logs: bool) -> None:
        if self.producer is not None:
            self.producer.close()
        for sup in self.fleet:
            sup.kill_everything()
        if self.watcher is not None:
            self.watcher.close()
        if self.watch is not None:
            self.watch.close()
        for proxy in self.proxies:
            proxy.close()
        if self.cluster is not None:
            if keep_logs and self.cluster.log.exists():
                shutil.copy(self.cluster.log, self.logs / "postgresql.log")
            self.cluster.remove()
        if keep_logs:
            print(f"logs: {self.logs}", flush=True)
        else:
            shutil.rmtree(self.logs, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: random, printed)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults (60)")
    parser.add_argument("--minutes", type=float, help="minutes of faults (overrides --duration)")
    parser.add_argument("--faults", default="all", help="comma-separated kinds (default all): "
                        + ", ".join(k.name for k in KINDS))
    parser.add_argument("--rate", type=float, default=15.0, help="application operations per second (15)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of workload before the first fault (5)")
    parser.add_argument("--settle", type=float, default=180.0, help="seconds the quiet period may take (180)")
    parser.add_argument("--recovery-deadline", type=float, default=180.0,
                        help="seconds after a fault's lift by which the fleet must work again (180)")
    parser.add_argument("--logs", help="keep the daemons' and the server's logs here (default: a temporary "
                                       "directory, kept only when the run fails)")
    parser.add_argument("--list-faults", action="store_true", help="print the fault kinds and exit")
    parser.add_argument("--inspect", action="store_true",
                        help="after the checks, keep the cluster up (its URL printed) until Enter or Ctrl-C")
    args = parser.parse_args(argv)
    if args.list_faults:
        for kind in KINDS:
            print(f"{kind.name:<22}{kind.says}")
        return 0
    if args.minutes is not None:
        args.duration = args.minutes * 60.0
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**6)
    if args.duration <= 0 or args.rate <= 0:
        parser.error("--duration and --rate must be positive")
    # the battery's own pools report every connection a restart or the hog refused: expected here
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    # SIGTERM as Ctrl-C: the cluster and the daemons are cleaned up either way
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    return Battery(args).run()


if __name__ == "__main__":
    sys.exit(main())
