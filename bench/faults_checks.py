"""The battery's verdict: invariants checked in SQL over xjobs' tables (schema ``xjobs``) and
the evidence the workload left beside them (schema ``app``, see ``faults_app``), and the
per-fault table.

Before the checks run, the battery writes what it knows and the database cannot into ``app``:
``app.ledger`` (every job id an enqueue answered), ``app.ghosts`` (what it rolled back),
``app.windows`` (each fault's window, from its injection to the next one's), and
``app.settled_at`` (when the quiet period found the workload settled). Each invariant is one
query answering the offending rows; an empty answer is a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import psycopg

WORK = ("plain", "tx_effect", "five_steps", "outboxed", "capped", "tenanted", "canary")
WORK_SQL = "(" + ", ".join(f"'{n}'" for n in WORK) + ")"
LIVE = "('ready', 'running', 'suspended')"
CRON_KEY = r"'^task:every_second:([0-9]+):'"


@dataclass(frozen=True)
class Invariant:
    name: str
    says: str           # what it promises, as the report prints it
    sql: str            # answers the offending rows; none is a pass


INVARIANTS = (
    Invariant("no job lost",
              "every enqueued and every committed-staged job settled (completed or dead)",
              f"""select j.id, j.name, j.state, left(coalesce(j.last_error, ''), 100)
                  from xjobs.jobs j, app.settled_at c
                  where j.state in {LIVE} and (j.name in {WORK_SQL} or (j.name = 'tick' and j.created_at < c.at))
                  union all
                  select l.id, l.name, 'missing', 'an enqueue answered this id; no such job now'
                  from app.ledger l left join xjobs.jobs j on j.id = l.id where j.id is null
                  union all
                  select j.id, j.name, j.state, 'completed, but its body never started'
                  from xjobs.jobs j
                  where j.state = 'completed' and (j.name in {WORK_SQL} or j.name = 'tick')
                    and not exists (select 1 from app.starts s where s.job_id = j.id)
                  order by 1"""),
    Invariant("outbox exactly once",
              "each committed staged row became exactly one job; nothing left unpublished",
              """select s.n, count(j.id), 'staged and committed: jobs made of it (want 1)'
                 from app.staged s
                 left join xjobs.jobs j on j.name = 'outboxed' and (j.payload->>'n')::bigint = s.n
                 group by s.n having count(j.id) <> 1
                 union all
                 select o.id, 0, 'outbox row never published'
                 from xjobs.outbox o where o.published_at is null
                 order by 1"""),
    Invariant("nothing rolled back appears",
              "no job from a rolled-back staging or enqueue(conn=), no rolled-back event delivered",
              """select j.id, g.what, g.n, 'a job from a rolled-back transaction'
                 from app.ghosts g join xjobs.jobs j on j.name = g.what and (j.payload->>'n')::bigint = g.n
                 union all
                 select j.id, 'outboxed', (j.payload->>'n')::bigint, 'an outbox job whose staging did not commit'
                 from xjobs.jobs j
                 where j.name = 'outboxed'
                   and not exists (select 1 from app.staged s where s.n = (j.payload->>'n')::bigint)
                 union all
                 select s.job_id, 'five_steps', (j.payload->>'n')::bigint,
                        'its wait answered ' || coalesce(s.result::text, 'null') || ' (the decoy was rolled back)'
                 from xjobs.job_steps s join xjobs.jobs j on j.id = s.job_id
                 where s.name = 's4' and s.state = 'completed'
                   and (s.result ? 'decoy' or (s.result->>'amount')::bigint is distinct from (j.payload->>'n')::bigint)
                 order by 1"""),
    Invariant("ctx.transaction() exactly once",
              "a completed tx_effect job has exactly one effect row, any other job none",
              """select j.id, j.state, count(e.job_id) as effects
                 from xjobs.jobs j left join app.tx_effects e on e.job_id = j.id
                 where j.name = 'tx_effect'
                 group by j.id, j.state
                 having count(e.job_id) <> case when j.state = 'completed' then 1 else 0 end
                 union all
                 select e.job_id, 'no such job', count(*) from app.tx_effects e
                 where not exists (select 1 from xjobs.jobs j where j.id = e.job_id) group by e.job_id
                 order by 1"""),
    Invariant("no completed step runs again",
              "no step body began after its step was recorded as completed",
              """select r.job_id, r.step, r.began, s.finished_at, r.pid
                 from app.step_runs r
                 join xjobs.job_steps s on s.job_id = r.job_id and s.name = r.step
                 where s.state = 'completed' and r.began > s.finished_at
                 order by 1, 2"""),
    Invariant("nothing starts early",
              "no sleep step woke before its wake time, no delayed job started before it was due",
              """select r.job_id, 's3 began ' || r.began::text || ' before s2 woke at ' || s.wake_at::text
                 from (select job_id, min(began) as began from app.step_runs where step = 's3' group by 1) r
                 join xjobs.job_steps s on s.job_id = r.job_id and s.name = 's2'
                 where r.began < s.wake_at
                 union all
                 select j.id, 'started ' || s.began::text || ', due '
                        || (j.created_at + (j.payload->>'delay_ms')::int * interval '1 millisecond')::text
                 from xjobs.jobs j
                 join (select job_id, min(began) as began from app.starts group by 1) s on s.job_id = j.id
                 where j.name = 'plain' and j.payload ? 'delay_ms'
                   and s.began < j.created_at + (j.payload->>'delay_ms')::int * interval '1 millisecond'
                 order by 1"""),
    Invariant("each cron occurrence fires once",
              "every second between the first and the last dispatched occurrence has exactly one tick job",
              f"""with occ as (
                      select (regexp_match(idempotency_key, {CRON_KEY}))[1]::bigint as at, count(*) as jobs,
                             array_agg(id order by id) as ids
                      from xjobs.jobs where name = 'tick' group by 1
                  ), span as (select min(at) as lo, max(at) as hi from occ)
                  select o.at, o.jobs, o.ids::text from occ o where o.jobs > 1
                  union all
                  select g.at, 0, 'never fired'
                  from span, generate_series(span.lo, span.hi, 1000) as g(at)
                  where not exists (select 1 from occ where occ.at = g.at)
                  order by 1"""),
    Invariant("every dead job carries a verdict",
              "a dead job has its last_error",
              """select id, name from xjobs.jobs where state = 'dead' and coalesce(last_error, '') = '' order by 1"""),
)


def check(conn: psycopg.Connection[Any]) -> list[tuple[Invariant, list[tuple]]]:
    return [(inv, conn.execute(inv.sql).fetchall()) for inv in INVARIANTS]


def write_evidence(conn: psycopg.Connection[Any], *, ledger: Iterable[tuple], ghosts: Iterable[tuple],
                   windows: Iterable[tuple], settled_at: float) -> None:
    """What the battery knows, for the queries: see the module doc."""
    conn.execute("""
        drop table if exists app.ledger, app.ghosts, app.windows, app.settled_at;
        create table app.ledger (id bigint primary key, name text not null, n bigint not null);
        create table app.ghosts (what text not null, n bigint not null);
        create table app.windows (seq int not null, kind text not null, began timestamptz not null,
                                  ended timestamptz not null);
        create table app.settled_at (at timestamptz not null)""")
    with conn.cursor() as cur:
        with cur.copy("copy app.ledger (id, name, n) from stdin") as copy:
            for row in ledger:
                copy.write_row(row)
        with cur.copy("copy app.ghosts (what, n) from stdin") as copy:
            for row in ghosts:
                copy.write_row(row)
        cur.executemany("insert into app.windows values (%s, %s, to_timestamp(%s), to_timestamp(%s))", list(windows))
        cur.execute("insert into app.settled_at values (to_timestamp(%s))", (settled_at,))


def per_window(conn: psycopg.Connection[Any]) -> dict[int, dict[str, int]]:
    """Per fault window (seq): extra body runs (``doubles``: every start of a job after its
    first, every execution of a step after its first), jobs marked crash suspects
    (``quarantined``), jobs whose lease lapsed and were charged the attempt (``lapsed``), and
    lost jobs by where they were last seen (their last start, or their creation)."""
    out: dict[int, dict[str, int]] = {}

    def add(rows: list[tuple], column: str) -> None:
        for seq, count in rows:
            out.setdefault(seq, {})[column] = int(count)
    add(conn.execute("""
        with runs as (
            select at, row_number() over (partition by job_id order by at) as nth
            from app.starts where name <> 'five_steps'
            union all
            select at, row_number() over (partition by job_id, step order by at) from app.step_runs)
        select w.seq, count(*) from runs join app.windows w on runs.at >= w.began and runs.at < w.ended
        where runs.nth > 1 group by 1""").fetchall(), "doubles")
    for outcome in ("quarantined", "lapsed"):
        add(conn.execute("""
            select w.seq, count(distinct h.job_id) from xjobs.job_history h
            join app.windows w on h.at >= w.began and h.at < w.ended
            where h.outcome = %s group by 1""", (outcome,)).fetchall(), outcome)
    add(conn.execute(f"""
        with lost as (
            select j.id, coalesce((select max(s.at) from app.starts s where s.job_id = j.id), j.created_at) as seen
            from xjobs.jobs j, app.settled_at c
            where j.state in {LIVE} and (j.name in {WORK_SQL} or (j.name = 'tick' and j.created_at < c.at)))
        select w.seq, count(*) from lost join app.windows w on lost.seen >= w.began and lost.seen < w.ended
        group by 1""").fetchall(), "lost")
    return out


def totals(conn: psycopg.Connection[Any]) -> list[tuple]:
    """Per job name: jobs, completed, dead, live, body starts (resumes included)."""
    return conn.execute(f"""
        select j.name, count(*), count(*) filter (where j.state = 'completed'),
               count(*) filter (where j.state = 'dead'), count(*) filter (where j.state in {LIVE}),
               coalesce(sum(s.starts), 0)
        from xjobs.jobs j
        left join (select job_id, count(*) as starts from app.starts group by 1) s on s.job_id = j.id
        group by 1 order by 1""").fetchall()


def dead_verdicts(conn: psycopg.Connection[Any]) -> list[tuple]:
    return conn.execute(r"""
        select name, left(regexp_replace(last_error, '[a-z-]+:[^:\s,)]+:[0-9a-f]{16}', '<worker>', 'g'), 120), count(*)
        from xjobs.jobs where state = 'dead' group by 1, 2 order by 3 desc limit 10""").fetchall()
