"""The WAL of one job's life, record by record, and what a retained job keeps on disk.

Enqueues N no-op jobs, then drives them through the driver's own verbs in batches, as a worker
does: every batch claimed, then each one's lease renewed (a heartbeat, ``--renewals`` times),
then each acked. Each phase's WAL is read back with ``pg_walinspect`` (``create extension pg_walinspect``, PostgreSQL 15+) and only the records of
this run's schema are counted: those touching its relations, and the commit records of the
transactions that wrote them. So the figures hold on a server doing other work, which a
server-wide ``pg_current_wal_lsn()`` difference does not.

``--checkpoint`` issues a CHECKPOINT between the enqueue and the drain, so every page's first
change after it carries a full-page image, as on a server whose checkpoint fell mid-queue.

The bare loop (a table of id, state, payload and one partial index, claimed and completed in
batches) is measured the same way in the same run: the ratio is what the jobs table costs over
the least a queue table can be.

    python bench/wal.py [--jobs 20000] [--batch 128] [--renewals 1] [--checkpoint] [--dsn ...]
    python bench/wal.py --daemon bench=256 [--jobs 20000] [--checkpoint]   # through xjobsd
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

import psycopg

from daemon import Daemon, drop_schema, enqueue_noops, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.records import Claim, Lease

_BLOCK = re.compile(r"rel \d+/\d+/(\d+)")
Key = tuple[str, str, str]


def lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("select pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def relations(conn: psycopg.Connection[Any], namespace: str) -> dict[int, str]:
    """relfilenode -> name of every table, index and TOAST relation of ``namespace``."""
    rows = conn.execute(
        "select c.relfilenode, c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = %s and c.relfilenode <> 0 "
        "union all select t.relfilenode, c.relname || ' (toast)' from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace join pg_class t on t.oid = c.reltoastrelid "
        "where n.nspname = %s", (namespace, namespace)).fetchall()
    return {int(node): str(name) for node, name in rows}


def records(conn: psycopg.Connection[Any], start: str, end: str,
            rels: dict[int, str]) -> dict[Key, list[int]]:
    """(relation, resource manager, record type) -> [count, bytes, full-page-image bytes] of the
    records between two LSNs that are this run's: they touch ``rels``, or they commit (or
    abort) a transaction that did."""
    rows = conn.execute(
        "select xid::text::bigint, resource_manager, record_type, record_length, fpi_length, block_ref "
        "from pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)", (start, end)).fetchall()
    mine: set[int] = set()
    for xid, _, _, _, _, block_ref in rows:
        if block_ref and any(int(n) in rels for n in _BLOCK.findall(block_ref)):
            mine.add(xid)
    out: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0])
    for xid, rmgr, kind, length, fpi, block_ref in rows:
        nodes = [int(n) for n in _BLOCK.findall(block_ref or "")]
        named = [rels[n] for n in nodes if n in rels]
        if named:
            where = named[0]
        elif rmgr == "Transaction" and xid in mine:
            where = "(commit)"
        else:
            continue
        entry = out[(where, rmgr, kind)]
        entry[0] += 1
        entry[1] += int(length)
        entry[2] += int(fpi)
    return out


def lifecycle(dsn: str, jobs: int, batch: int, checkpoint: bool, renewals: int = 1,
              fillfactor: int | None = None) -> tuple[dict[str, dict[Key, list[int]]], int, int, dict[str, int]]:
    """The records of each phase of ``jobs`` jobs' lives, and the bytes the jobs table and its
    indexes hold once they are all completed."""
    schema = fresh_schema(dsn)
    phases: dict[str, dict[Key, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if fillfactor is not None:
                conn.execute(f"alter table {schema}.jobs set (fillfactor = {int(fillfactor)})")
            rels = relations(conn, schema)

            def count(phase: str, since: str) -> None:
                # read at once: a checkpoint may recycle the segments soon after
                for key, (n, size, fpi) in records(conn, since, lsn(conn), rels).items():
                    entry = phases[phase][key]
                    entry[0], entry[1], entry[2] = entry[0] + n, entry[1] + size, entry[2] + fpi

            start = lsn(conn)
            enqueue_noops(dsn, schema, jobs)
            count("enqueue", start)
            if checkpoint:
                conn.execute("checkpoint")
            driver = PostgresDriver(dsn, schema=schema)
            try:
                # phase by phase over the whole set, as in a worker where a renewal comes
                # seconds after the claim (the versions a claim left dead can be pruned by then)
                held: list[list[Lease]] = []
                while True:
                    before = lsn(conn)
                    claimed = driver.job_claim(Claim(queues=["bench"], limit=batch, lease_ms=30_000,
                                                     identity="wal-bench"))
                    if not claimed:
                        break
                    count("claim", before)
                    held.append([Lease(job.id, job.token) for job in claimed])
                for verb in ["heartbeat"] * renewals + ["ack"]:
                    for leases in held:
                        before = lsn(conn)
                        if verb == "heartbeat":
                            done = driver.job_renew_many(leases, 30_000)
                        else:
                            done = driver.job_ack_many(leases)
                        assert done == {lease.job_id for lease in leases}, verb
                        count(verb, before)
            finally:
                driver.close()
            each = dict(conn.execute(
                "select c.relname, pg_relation_size(c.oid) from pg_class c where c.oid = %s::regclass "
                "or c.oid in (select indexrelid from pg_index where indrelid = %s::regclass) order by 2 desc",
                (f"{schema}.jobs",) * 2).fetchall())
            return dict(phases), *stored(conn, f"{schema}.jobs"), each
    finally:
        drop_schema(dsn, schema)


def daemon_lifecycle(dsn: str, jobs: int, queue: str, checkpoint: bool,
                     fillfactor: int | None = None) -> tuple[dict[Key, list[int]], int, int]:
    """The records of this schema while ``xjobsd run --queue QUEUE`` drains ``jobs`` jobs, from
    its start to its exit: the claims and acks, and everything the daemon writes beside them."""
    schema = fresh_schema(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if fillfactor is not None:
                conn.execute(f"alter table {schema}.jobs set (fillfactor = {int(fillfactor)})")
        enqueue_noops(dsn, schema, jobs)
        with psycopg.connect(dsn, autocommit=True) as conn:
            if checkpoint:
                conn.execute("checkpoint")
            rels = relations(conn, schema)
            found: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0])
            mark = lsn(conn)

            def count() -> None:
                # read as the drain goes: a checkpoint may recycle the segments soon after
                nonlocal mark
                end = lsn(conn)
                for key, (n, size, fpi) in records(conn, mark, end, rels).items():
                    entry = found[key]
                    entry[0], entry[1], entry[2] = entry[0] + n, entry[1] + size, entry[2] + fpi
                mark = end

            busy = (f"select exists(select 1 from {schema}.jobs where state = 'ready') "
                    f"or exists(select 1 from {schema}.jobs where state = 'running')")
            with Daemon(dsn, schema, [queue]):
                deadline = time.monotonic() + 600
                while conn.execute(busy).fetchone() != (False,):
                    assert time.monotonic() < deadline, "the drain did not finish"
                    count()
                    time.sleep(0.5)
            count()
            return dict(found), *stored(conn, f"{schema}.jobs")
    finally:
        drop_schema(dsn, schema)


def stored(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    """Bytes of ``table`` with its indexes and TOAST: as the drain left it, and after a VACUUM
    (what the retained rows keep once their dead versions are reclaimed)."""
    size = "select pg_total_relation_size(%s::regclass)"
    row = conn.execute(size, (table,)).fetchone()
    conn.execute(f"vacuum {table}")
    after = conn.execute(size, (table,)).fetchone()
    assert row is not None and after is not None
    return int(row[0]), int(after[0])


def bare_loop(dsn: str, jobs: int, batch: int, checkpoint: bool) -> tuple[float, int, int]:
    """(WAL bytes per job of the claim and completion, table bytes after) of the bare loop."""
    schema = f"xjobs_bare_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.q"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
        conn.execute(f"create table {table} (id bigint generated always as identity primary key, "
                     "state text not null default 'ready', payload jsonb not null default '{}')")
        conn.execute(f"create index on {table} (id) where state = 'ready'")
        conn.execute(f"insert into {table} (payload) select jsonb_build_object('n', g) from generate_series(1, %s) g",
                     (jobs,))
        conn.execute(f"analyze {table}")
        if checkpoint:
            conn.execute("checkpoint")
        rels = relations(conn, schema)
        total = 0
        claim = (f"update {table} t set state = 'running' from (select id from {table} where state = 'ready' "
                 f"order by id limit %s for update skip locked) p where t.id = p.id returning t.id")
        while True:
            before = lsn(conn)
            with conn.transaction():
                ids = [r[0] for r in conn.execute(claim, (batch,)).fetchall()]
            if not ids:
                break
            with conn.transaction():
                conn.execute(f"update {table} set state = 'done' where id = any(%s)", (ids,))
            total += sum(e[1] for e in records(conn, before, lsn(conn), rels).values())
        sizes = stored(conn, table)
        conn.execute(f"drop schema {schema} cascade")
    return total / jobs, *sizes


def print_phase(phase: str, found: dict[Key, list[int]], n: int) -> float:
    """Print a phase's records (those under 1 B a job folded into one line); answer its bytes
    per job."""
    rest = [0, 0, 0]
    for (where, rmgr, kind), (count, size, fpi) in sorted(found.items(), key=lambda kv: -kv[1][1]):
        if size / n < 1.0:
            rest = [rest[0] + count, rest[1] + size, rest[2] + fpi]
            continue
        print(f"{phase:<10} {where:<28} {rmgr + '/' + kind:<24} {count / n:>9.2f} {size / n:>8,.1f} {fpi / n:>10,.1f}")
    print(f"{phase:<10} {'(the rest)':<28} {'':<24} {rest[0] / n:>9.2f} {rest[1] / n:>8,.1f} {rest[2] / n:>10,.1f}")
    total = sum(e[1] for e in found.values()) / n
    fpis = sum(e[2] for e in found.values()) / n
    print(f"{phase:<10} {'= total':<28} {'':<24} {'':>9} {total:>8,.1f} {fpis:>10,.1f}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--renewals", type=int, default=1, help="lease renewals per job (heartbeats)")
    parser.add_argument("--fillfactor", type=int, help="set on the jobs table before the enqueue (to compare)")
    parser.add_argument("--daemon", metavar="QUEUE",
                        help="instead: the records of xjobsd draining the jobs, e.g. bench=256")
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    n = args.jobs
    if args.daemon:
        found, kept, vacuumed = daemon_lifecycle(args.dsn, n, args.daemon, args.checkpoint, args.fillfactor)
        bare, bare_kept, bare_vacuumed = bare_loop(args.dsn, n, 500, args.checkpoint)
        print(f"WAL of xjobsd --queue {args.daemon} draining {n:,} jobs, per job")
        print_phase("xjobsd", found, n)
        total = sum(e[1] for e in found.values()) / n
        print(f"\nWAL per completed job: xjobsd {total:,.0f} B, bare loop (batches of 500) {bare:,.0f} B, "
              f"ratio {total / bare:.2f}")
        print(f"table + indexes per job after the drain: xjobsd {kept / n:,.0f} B, bare loop {bare_kept / n:,.0f} B, "
              f"ratio {kept / bare_kept:.2f}; after a VACUUM {vacuumed / n:,.0f} against {bare_vacuumed / n:,.0f}")
        return
    phases, kept, vacuumed, each = lifecycle(args.dsn, args.jobs, args.batch, args.checkpoint,
                                         args.renewals, args.fillfactor)
    bare, bare_kept, bare_vacuumed = bare_loop(args.dsn, args.jobs, args.batch, args.checkpoint)
    print(f"WAL of {n:,} jobs' lives (batches of {args.batch}{', checkpoint before the drain' if args.checkpoint else ''}),"
          " per job")
    print(f"{'phase':<10} {'relation':<28} {'record':<24} {'recs/job':>9} {'B/job':>8} {'FPI B/job':>10}")
    totals = {phase: print_phase(phase, found, n) for phase, found in phases.items()}
    drain = totals["claim"] + totals["ack"]
    print()
    print(f"{'per completed job':<40} {'jobs table':>12} {'bare loop':>10} {'ratio':>6}")
    print(f"{'WAL of claim + ack (B)':<40} {drain:>12,.0f} {bare:>10,.0f} {drain / bare:>6.2f}")
    if args.renewals:
        print(f"{'WAL of one lease renewal (B)':<40} {totals['heartbeat'] / args.renewals:>12,.0f}")
    print(f"{'table + indexes after the drain (B)':<40} {kept / n:>12,.0f} {bare_kept / n:>10,.0f} "
          f"{kept / bare_kept:>6.2f}")
    print("  of which " + ", ".join(f"{name} {size / n:,.0f}" for name, size in each.items() if size))
    print(f"{'the same after a VACUUM (B)':<40} {vacuumed / n:>12,.0f} {bare_vacuumed / n:>10,.0f} "
          f"{vacuumed / bare_vacuumed:>6.2f}")


if __name__ == "__main__":
    main()
