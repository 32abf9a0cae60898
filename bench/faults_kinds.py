"""The fault kinds. Each ``run(battery, rng)`` injects its fault and lifts it again (a hold
is the fault itself: a stall of N seconds, a pin of minutes), and answers one line saying
exactly what it did, which the battery prints with the time and keeps for the report. Every
choice (which daemon, which child, how long) is drawn from ``rng``, the battery's fault
stream, so the same seed replays the same faults in the same order.

Holds marked "scaled" are multiplied by the battery's ``scale`` (1 for runs of 15 minutes or
more, less for shorter ones, so a minute's run still fits several faults).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from typing import TYPE_CHECKING, Any

import psycopg

from faults_fleet import LEASE_S, SILENCE_S, alive, faketime_library

if TYPE_CHECKING:
    from faults import Battery


class Kind:
    name = ""
    says = ""

    def unavailable(self, b: "Battery") -> str | None:
        """Why this kind cannot run here (printed, and the kind is skipped), or None."""
        return None

    def run(self, b: "Battery", rng: random.Random) -> str:
        raise NotImplementedError


def _pick_child(b: "Battery", rng: random.Random, role: str | None = None,
                busy: bool = False) -> tuple[Any, dict] | None:
    """A (supervisor, child row) of ``role`` (any role when None), chosen by ``rng`` from a
    list ordered by supervisor and child title, so the seed's choice is stable. With ``busy``,
    one holding running jobs now (the database says, by holder) when there is one; its row's
    ``in_flight`` is then that count."""
    rows = []
    for sup in b.fleet:
        for child in sorted(sup.children(), key=lambda c: (c["role"], c.get("queue") or "", c.get("index", 0))):
            if role is None or child["role"] == role:
                rows.append((sup, child))
    if busy:
        try:
            held = dict(b.sql("select claimed_by, count(*) from xjobs.jobs where state = 'running' group by 1"))
        except psycopg.Error:
            held = {}
        busy_rows = [(sup, {**c, "in_flight": held[c["identity"]]}) for sup, c in rows if held.get(c.get("identity"))]
        rows = busy_rows or rows
    return rng.choice(rows) if rows else None


def _title(sup: Any, child: dict) -> str:
    queue = f" queue={child['queue']}" if child.get("queue") else ""
    return f"{sup.name}: {child['role']}{queue} #{child.get('index', 1)} pid {child['pid']} ({child.get('in_flight', 0)} in flight)"


class KillWorker(Kind):
    name, says = "worker-kill", "SIGKILL of a worker child"

    def run(self, b, rng):
        # mostly one holding jobs now: killing an idle one tests the restart alone
        picked = _pick_child(b, rng, "worker", busy=rng.random() < 0.8)
        if picked is None:
            return "no worker child to kill"
        sup, child = picked
        os.kill(child["pid"], signal.SIGKILL)
        return f"SIGKILL {_title(sup, child)}"


class KillLeader(Kind):
    name, says = "leader-kill", "SIGKILL of the scheduler leader child"

    def run(self, b, rng):
        rows = [(sup, c) for sup in b.fleet for c in sup.children()
                if c["role"] == "scheduler" and (c.get("stats") or {}).get("leader")]
        if not rows:
            return "no scheduler leads right now: nothing killed"
        sup, child = rows[0]
        os.kill(child["pid"], signal.SIGKILL)
        return f"SIGKILL the leader, {_title(sup, child)}"


class KillRelay(Kind):
    name, says = "relay-kill", "SIGKILL of an outbox-relay child"

    def run(self, b, rng):
        picked = _pick_child(b, rng, "outbox-relay")
        if picked is None:
            return "no relay to kill"
        sup, child = picked
        os.kill(child["pid"], signal.SIGKILL)
        return f"SIGKILL {_title(sup, child)}"


class KillSupervisor(Kind):
    name, says = "supervisor-kill", "SIGKILL of a whole supervisor, then restarted"

    def run(self, b, rng):
        sup = rng.choice(b.fleet)
        kids = sup.kill()
        began = time.monotonic()
        gone = b.wait(lambda: not any(alive(pid) for pid in kids), 30.0)
        took = time.monotonic() - began
        b.orphan_waits.append(took)
        left = [pid for pid in kids if alive(pid)]
        for pid in left:      # never left behind: they would hold jobs and slots forever
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not gone:
            b.problem("children outlive their supervisor", f"{sup.name}: pids {left} still alive 30 s after "
                                                           f"the supervisor was SIGKILLed")
        sup.start()
        sup.wait_ready(60)
        return f"SIGKILL supervisor {sup.name} (pid {sup.generations[-2].pid}); its {len(kids)} children gone " \
               f"in {took:.2f} s; restarted as pid {sup.current.pid}"


class StopChild(Kind):
    name, says = "child-stop", "SIGSTOP of a child past its lease, then SIGCONT"

    def run(self, b, rng):
        picked = _pick_child(b, rng)
        hold = rng.uniform(LEASE_S + 1.0, SILENCE_S + 3.0)
        if picked is None:
            return "no child to stop"
        sup, child = picked
        os.kill(child["pid"], signal.SIGSTOP)
        b.hold(hold)
        try:
            os.kill(child["pid"], signal.SIGCONT)
            after = "SIGCONT" if alive(child["pid"]) else "gone (its supervisor killed it)"
        except ProcessLookupError:
            after = "gone (its supervisor killed it)"
        return f"SIGSTOP {_title(sup, child)} for {hold:.1f} s (lease {LEASE_S:g} s), then {after}"


class RestartPostgres(Kind):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.name = f"pg-restart-{mode}"
        self.says = f"PostgreSQL restarted ({mode})"

    def run(self, b, rng):
        took = b.cluster.restart(self.mode)
        return f"pg_ctl restart -m {self.mode}: down and up in {took:.2f} s"


class TerminateStorm(Kind):
    name, says = "terminate-storm", "pg_terminate_backend on every xjobs session, twice a second"

    def run(self, b, rng):
        seconds = rng.uniform(3.0, 8.0)
        end, rounds, killed = time.monotonic() + seconds, 0, 0
        while time.monotonic() < end:
            try:
                with b.cluster.session() as conn:
                    killed += conn.execute(
                        "select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity "
                        "where usename = 'xjobs' and application_name <> 'faults-app' "
                        "and pid <> pg_backend_pid()").fetchone()[0]
                rounds += 1
            except psycopg.Error:
                pass
            b.hold(0.5)
        return f"{rounds} rounds over {seconds:.1f} s: {killed} sessions terminated"


def _cut(b: "Battery", rng: random.Random) -> tuple[str, list]:
    """Whose network a proxy fault hits: one supervisor's (the other runs on and may take its
    jobs over) or both."""
    target = rng.choice([*(sup.name for sup in b.fleet), "both"])
    return target, [sup for sup in b.fleet if target in ("both", sup.name)]


class ProxyStall(Kind):
    name, says = "proxy-stall", "the network between a supervisor (or both) and PostgreSQL stalls, then resumes"

    def run(self, b, rng):
        target, sups = _cut(b, rng)
        seconds = rng.uniform(1.5, 2.5 * LEASE_S)
        for sup in sups:
            sup.proxy.stall()
        b.hold(seconds)
        for sup in sups:
            sup.proxy.resume()
        count = sum(sup.proxy.connections() for sup in sups)
        return f"{target}: {count} connections stalled for {seconds:.1f} s (lease {LEASE_S:g} s)"


class ProxyReset(Kind):
    name, says = "proxy-reset", "the network resets every connection of a supervisor (or both) (TCP RST)"

    def run(self, b, rng):
        target, sups = _cut(b, rng)
        times = rng.randint(1, 3)
        counts = []
        for i in range(times):
            counts.append(sum(sup.proxy.reset() for sup in sups))
            if i + 1 < times:
                b.hold(rng.uniform(0.3, 2.0))
        return f"{target}: {times} reset(s): {', '.join(map(str, counts))} connections"


class ClockAhead(Kind):
    name, says = "clock-ahead", "one supervisor's wall clock hours ahead (libfaketime)"

    def unavailable(self, b):
        if faketime_library() is None:
            return ("libfaketime not found (Debian: apt-get install faketime; or set XJOBS_FAULTS_FAKETIME "
                    "to libfaketimeMT.so.1)")
        return None

    def run(self, b, rng):
        sup = rng.choice(b.fleet)
        skew = rng.randint(1, 6) * 3600 + rng.randint(0, 3599)
        hold = rng.uniform(20.0, 60.0) * b.scale     # scaled
        codes = [sup.drain()]
        sup.start(skew_s=skew)
        sup.wait_ready(60)
        b.hold(hold)
        codes.append(sup.drain())
        sup.start()
        sup.wait_ready(60)
        return f"{sup.name} drained (exit {codes[0]}), ran {skew / 3600:.2f} h ahead for {hold:.0f} s, drained " \
               f"(exit {codes[1]}) and restarted on time"


class PinXmin(Kind):
    name, says = "xmin-pin", "a session holds a transaction (and the xmin horizon) open"

    def run(self, b, rng):
        hold = rng.uniform(60.0, 180.0) * b.scale    # scaled
        with b.cluster.session(application_name="faults-pin") as conn:
            conn.execute("begin isolation level repeatable read")
            xid = conn.execute("select txid_current()").fetchone()[0]
            conn.execute("select count(*) from xjobs.jobs")
            b.hold(hold)
            dead = conn.execute("select coalesce(sum(n_dead_tup), 0) from pg_stat_user_tables "
                                "where schemaname = 'xjobs'").fetchone()[0]
            conn.execute("commit")
        return f"transaction {xid} held open for {hold:.0f} s; {dead} dead tuples in xjobs' tables at its end"


class ExhaustConnections(Kind):
    name, says = "conn-exhaust", "connections held until max_connections is nearly exhausted"

    def run(self, b, rng):
        hold = rng.uniform(10.0, 30.0) * b.scale     # scaled
        leave = rng.randint(0, 3)
        held: list[psycopg.Connection] = []
        try:
            limit = b.cluster.max_connections - b.cluster.reserved - leave
            while True:
                with b.cluster.session() as conn:
                    used = conn.execute("select count(*) from pg_stat_activity "
                                        "where backend_type = 'client backend'").fetchone()[0]
                if used >= limit or len(held) > b.cluster.max_connections:
                    break
                for _ in range(limit - used):
                    try:
                        held.append(b.cluster.connect(application_name="faults-hog"))
                    except psycopg.OperationalError:
                        break
            b.hold(hold)
        finally:
            for conn in held:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
        return f"{len(held)} connections held for {hold:.0f} s, {leave} ordinary slot(s) left free"


KINDS: tuple[Kind, ...] = (KillWorker(), KillLeader(), KillRelay(), KillSupervisor(), StopChild(),
                           RestartPostgres("fast"), RestartPostgres("immediate"), TerminateStorm(),
                           ProxyStall(), ProxyReset(), ClockAhead(), PinXmin(), ExhaustConnections())
