-- Every statement of the Postgres driver, one named block each. The driver parses this file
-- at import and prepares statements on first use. {schema} is the configured schema name.
-- {now} is the current time (a timestamptz): the server's statement_timestamp() in
-- production, so leases and due times are measured on one clock however far the workers'
-- clocks drift apart; to_timestamp(%(now)s / 1000.0), from an injected clock, in tests.
-- Durations arrive as milliseconds and are added as intervals; absolute times arrive and
-- leave as epoch milliseconds. No statement reads or returns a whole row.
-- A block whose name starts with _ is a fragment, not a statement: a statement writes
-- {_name} where its text goes (sql.raw_statements puts it in).

-- name: job_enqueue
-- the batch arrives as ONE json document (payloads embedded as they were encoded), which the
-- server unpacks in C: far cheaper than binding nine arrays element by element. json, not
-- jsonb: json_to_recordset reads the text once, where a jsonb cast first builds the whole
-- batch as a binary document (about 1.2 us of server CPU per job more, bench/enqueue_bench.py).
-- A key the document leaves out (NewJob.document drops None fields) reads as null. A job that
-- declares a dedupe window (w, ms) is not inserted while a completed job of its namespace is
-- inside that job's window: one lookup in jobs_dedupe_idx, made only for such jobs
insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, enqueued_by,
                           priority, max_attempts, run_at, created_at, dedupe_window, traceparent,
                           concurrency_key, key_cap, key_hold, fair_key, rate_key)
-- run_at: the absolute time r when one is given, else now plus the delay d. A keyed row (ck)
-- goes in waiting for its key, and is let in by the statement's trigger (migration 14)
select u.n, u.q, 'ready', u.p, u.k, u.t, u.e, u.pr, u.m,
       coalesce(to_timestamp(u.r / 1000.0), {now} + u.d * interval '1 millisecond'), {now},
       u.w * interval '1 millisecond', u.tp, u.ck, u.kc, u.kh, u.fk, u.rk
from json_to_recordset(%(rows)s::json)
     as u(n text, q text, p jsonb, k text, t text, e text, pr int, m int, r float8, d float8, w float8,
          tp text, ck text, kc int, kh boolean, fk text, rk text)
where u.w is null or not exists (
    select 1 from {schema}.jobs c
    where c.state = 'completed' and c.dedupe_window is not null
      and c.name = u.n and coalesce(c.tenant, '') = coalesce(u.t, '') and c.idempotency_key = u.k
      and c.finished_at + c.dedupe_window > {now})
on conflict (name, (coalesce(tenant, '')), idempotency_key)
    where state in ('ready', 'running', 'suspended') do nothing
returning id, name, coalesce(tenant, '') as tenant, idempotency_key

-- name: job_enqueue_ids
-- a chunk's ids, drawn from the identity's sequence before the chunk is copied (a COPY answers
-- no rows), and the now its rows are stamped with: the clock the insert statement reads
select {now} as now,
       array(select nextval((select pg_get_serial_sequence('{schema}.jobs', 'id'))::regclass)
             from generate_series(1, %(count)s)) as ids

-- name: job_enqueue_copy
-- the rows of a chunk none of whose namespaces is held, as COPY takes them (PgJobs.copy_row):
-- a multi-row heap insert without the executor per row, about twice the rows per second of the
-- insert above. The unique index still guards the namespace: a live holder the chunk did not
-- know of fails it, and the chunk is rolled back to its savepoint and goes through job_enqueue
copy {schema}.jobs (id, name, queue, state, payload, idempotency_key, tenant, enqueued_by, priority,
                    max_attempts, run_at, created_at, traceparent, key_hold, fair_key, rate_key) from stdin

-- name: job_find_holder
-- who holds each namespace: the live job, else a completed one still inside its dedupe
-- window (the newest); live holders first, so the caller keeps the first row per namespace
select j.id, j.name, coalesce(j.tenant, '') as tenant, j.idempotency_key
from {schema}.jobs j
join json_to_recordset(%(keys)s::json) as u(n text, t text, k text)
  on j.name = u.n and coalesce(j.tenant, '') = u.t and j.idempotency_key = u.k
where j.state in ('ready', 'running', 'suspended')
   or (j.state = 'completed' and j.dedupe_window is not null
       and j.finished_at + j.dedupe_window > {now})
order by j.state = 'completed', j.id desc

-- name: job_claim_one
-- Every claim (and every batch verb that locks rows in a CTE) updates its rows through
-- "id = any(array(select id from picked))": the planner reads that as a primary-key probe per
-- row whatever it guesses of the batch size. A join against the CTE instead plans, once the
-- prepared statement goes generic, as a hash join over a scan of the whole table (a guess of
-- 10,000 picked rows): 20 ms a claim at 100,000 rows, and growing with every finished row kept.
-- suspects (crashes > 0) are left to job_claim_alone; a paused queue is claimed by nobody; a
-- worker claims only the job names it runs (%(names)s; null: any), so during a rolling deploy
-- an old worker never takes, and fails, a job of a name it does not have. The last column says
-- the job was never claimed before (started_at was null: only a claim sets it, and nothing
-- clears it), so no attempt of it can have recorded a step and its run skips the step read;
-- a woken sleeper, a retry, an interrupted or snoozed run were all claimed before. "not in"
-- over the CTE is a hashed subplan, built once per claim from the few rows claimed before
with picked as (
    select id, started_at is not null as started from {schema}.jobs
    where state = 'ready' and queue = %(queue)s and run_at <= {now} and crashes = 0 and {_rate_open}
      and not exists (select 1 from {schema}.queues p where p.name = %(queue)s and p.paused)
      and (%(names)s::text[] is null or name = any(%(names)s::text[]))
    order by priority, run_at, id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now}, progress = null,
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
where j.id = any(array(select id from picked))
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority, j.traceparent,
          j.snoozes, j.id not in (select id from picked where started)

-- name: job_claim_many
-- its own statement: queue = any(...) cannot read jobs_ready_idx in order, so a worker
-- claims one queue per statement with job_claim_one and this serves multi-queue callers
with picked as (
    select id, started_at is not null as started from {schema}.jobs
    where state = 'ready' and queue = any(%(queues)s::text[]) and run_at <= {now} and crashes = 0 and {_rate_open}
      and queue not in (select p.name from {schema}.queues p where p.paused)
      and (%(names)s::text[] is null or name = any(%(names)s::text[]))
    order by priority, run_at, id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now}, progress = null,
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
where j.id = any(array(select id from picked))
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority, j.traceparent,
          j.snoozes, j.id not in (select id from picked where started)

-- name: job_claim_alone
-- suspects of a crash, for a worker that will run them with nothing beside them: the first in
-- line and, up to %(limit)s in all, the rest of its group (suspect_group: the half of a crashed
-- process's jobs it was put in, see job_release_worker; none: it runs alone). A busy worker
-- asks only for suspects that have waited %(wait)s ms (an idle one would have taken them
-- sooner), so suspects go to idle workers first, and the other halves to other processes
with lead as (
    select id, suspect_group from {schema}.jobs
    where state = 'ready' and queue = %(queue)s and crashes > 0 and {_rate_open}
      and run_at <= {now} - %(wait)s * interval '1 millisecond'
      and not exists (select 1 from {schema}.queues p where p.name = %(queue)s and p.paused)
      and (%(names)s::text[] is null or name = any(%(names)s::text[]))
    order by priority, run_at, id
    limit 1
    for update skip locked
), members as (
    select j.id from {schema}.jobs j
    where j.suspect_group = (select lead.suspect_group from lead)
      and j.state = 'ready' and j.queue = %(queue)s and j.crashes > 0 and j.run_at <= {now}
      and j.id <> (select lead.id from lead)
      and (%(names)s::text[] is null or j.name = any(%(names)s::text[]))
    order by j.priority, j.run_at, j.id
    limit greatest(%(limit)s - 1, 0)
    for update skip locked
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now}, progress = null,
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
where j.id = any(array(select id from lead union all select id from members))
-- a suspect crashed a run of itself: it was claimed before (never a first claim)
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority, j.traceparent,
          j.snoozes, false

-- name: job_ack_many
-- the fences of a batch: (id, token) pairs. Planned for the batch at hand (the driver does not
-- prepare it): a generic plan guesses 10 pairs and joins them by a nested loop, 65,000 row
-- comparisons for a batch of 256. "id = any(ids)" keeps the jobs side on the primary key, so
-- the running rows of the whole fleet are never scanned for one worker's batch. results are the
-- bodies' return values (JSON text, NULL for None), in the order of ids. Waiters on results are
-- told on %(settled)s at commit: the completed ids, comma-separated, 300 to a note
-- (under the 8000-byte payload limit), a few notes per batch rather than one per job
with done as (
    update {schema}.jobs j
    set state = 'completed', finished_at = {now}, last_error = null,
        lease_token = null, lease_expires_at = null, result = a.result::jsonb
    from unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[]) as a(id, token, result)
    where j.id = any(%(ids)s::bigint[]) and j.id = a.id and j.lease_token = a.token and j.state = 'running'
    returning j.id
), told as (
    select pg_notify(%(settled)s, string_agg(id::text, ',')) from
        (select id, (row_number() over (order by id) - 1) / 300 as chunk from done) as c
    group by chunk
)
select done.id from done, (select count(*) from told) as t

-- name: job_nack_many
-- the settlements of a batch as ONE json document (rows of id, token, outcome, error, delay,
-- traceback), fenced per job on its token and planned per batch like job_ack_many. The outcome
-- alone decides the rest (records.Nack): retried and dead spend the attempt, and a run that
-- ended on its own clears any suspicion of crashing its process; interrupted, suspended,
-- snoozed and shed give it back (a snooze is counted in snoozes, which its job's max_snoozes
-- bounds). A shed with no delay keeps its run_at: it keeps its place in the claim order and
-- its age in the oldest-ready figure (a saturated capped job must not look freshly enqueued),
-- and it writes no history (it is not an event in the job's life: the worker counts it,
-- outcome "shed")
with n as (
    select id, token, outcome, error, delay, traceback, outcome in ('retried', 'dead') as counts
    from jsonb_to_recordset(%(rows)s::jsonb)
         as r(id bigint, token bigint, outcome text, error text, delay float8, traceback text)
), settled as (
    update {schema}.jobs j
    set state = case n.outcome when 'dead' then 'dead' when 'suspended' then 'suspended' else 'ready' end,
        attempt = case when n.counts then j.attempt else greatest(j.attempt - 1, 0) end,
        run_at = case when n.outcome = 'dead' or (n.outcome = 'shed' and n.delay = 0) then j.run_at
                      else {now} + n.delay * interval '1 millisecond' end,
        finished_at = case when n.outcome = 'dead' then {now} end,
        last_error = coalesce(n.error, j.last_error),
        crashes = case when n.counts then 0 else j.crashes end,
        suspect_group = case when n.counts then null else j.suspect_group end,
        snoozes = j.snoozes + (n.outcome = 'snoozed')::int,
        lease_token = null, lease_expires_at = null
    from n
    where j.id = any(%(ids)s::bigint[]) and j.id = n.id and j.lease_token = n.token and j.state = 'running'
    returning j.id, j.queue, j.state, j.attempt, n.outcome, n.error, n.delay, n.traceback, n.counts
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error, traceback)
    select id, {now}, case when counts then attempt else attempt + 1 end, outcome, error, traceback
    from settled
    where outcome <> 'shed'
)
select id, queue, state, outcome, delay from settled

-- name: job_renew_many
-- the fences of every held lease, planned per batch like job_ack_many. No index reads
-- lease_expires_at (schema 17; tests/drivers/test_lean_jobs.py), so a renewal is a HOT update
-- whenever the row's page has room: no new index entries, about 80 bytes of WAL
update {schema}.jobs j
set lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
from unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) as a(id, token)
where j.id = any(%(ids)s::bigint[]) and j.id = a.id and j.lease_token = a.token and j.state = 'running'
returning j.id

-- name: job_rescue_lapsed
-- A lapsed job is charged its attempt only when it was its holder's ONLY running job and that
-- holder was never seen dying beside others (crashed_workers): a job that lapsed beside others
-- (their process died with all of them) gets the attempt back and becomes a suspect, run alone
-- next, as for a crash the supervisor saw (job_release_worker); the holder is remembered, so
-- its jobs whose leases end later are judged the same. The attempt that lapsed is written to
-- the history like any other, in the same statement.
with lapsed as (
    select id, claimed_by from {schema}.jobs
    where state = 'running' and lease_expires_at < {now}
    order by lease_expires_at, id
    limit %(limit)s
    for update skip locked
), company as (
    select r.claimed_by, count(*) as running
    from {schema}.jobs r
    where r.state = 'running' and r.claimed_by in (select claimed_by from lapsed)
    group by r.claimed_by
), ranked as (
    -- the lapsed jobs of one holder are split in two halves, as job_release_worker explains
    select l.id, row_number() over (partition by l.claimed_by order by l.id) as rn,
           count(*) over (partition by l.claimed_by) as n
    from lapsed l
), halves as (
    select r.id, case when r.n > 1 then min(r.id) over (partition by l.claimed_by, 2 * r.rn <= r.n + 1) end as half
    from ranked r join lapsed l on l.id = r.id
), judged as (
    select l.id, l.claimed_by, h.half,
           coalesce(c.running, 1) = 1
           and not exists (select 1 from {schema}.crashed_workers w where w.worker = l.claimed_by) as alone
    from lapsed l join halves h on h.id = l.id left join company c on c.claimed_by = l.claimed_by
), noted as (
    insert into {schema}.crashed_workers (worker, at)
    select distinct judged.claimed_by, {now} from judged
    where not judged.alone and judged.claimed_by is not null
    on conflict (worker) do nothing
), rescued as (
    update {schema}.jobs j
    set state = case when judged.alone and j.attempt >= j.max_attempts then 'dead' else 'ready' end,
        attempt = case when judged.alone then j.attempt else greatest(j.attempt - 1, 0) end,
        crashes = case when judged.alone then j.crashes else j.crashes + 1 end,
        suspect_group = case when judged.alone then j.suspect_group else judged.half end,
        run_at = {now},
        finished_at = case when judged.alone and j.attempt >= j.max_attempts then {now} end,
        last_error = case
            when judged.alone and j.attempt >= j.max_attempts
                then 'dead: lease expired on the last attempt, held by ' || coalesce(j.claimed_by, '?')
            when judged.alone then 'lease expired, held by ' || coalesce(j.claimed_by, '?')
            else 'lease expired beside other jobs of ' || coalesce(j.claimed_by, '?')
                 || '; attempt not counted, runs apart from other work next' end,
        lease_token = null, lease_expires_at = null
    from judged where j.id = judged.id
    returning j.id, j.attempt, j.state, j.last_error, j.queue, judged.alone
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select rescued.id, {now}, case when rescued.alone then rescued.attempt else rescued.attempt + 1 end,
           case when rescued.state = 'dead' then 'dead' when rescued.alone then 'lapsed'
                else 'quarantined' end,
           rescued.last_error
    from rescued
)
-- the queues answered here are woken with queue_notify
select rescued.id, rescued.queue, rescued.state from rescued

-- name: job_release_worker
-- A worker process that died: its running jobs go back now, fenced on its identity.
-- * it crashed (%(crashed)s) holding ONE job: that job is the suspect and its attempt counts
--   (dead on the last one, with a verdict that says it crashed its process), as %(charge)s
--   allows: 'alone' (it died on its own), 'suspect' (it went silent: only a job already under
--   suspicion is charged, as a stalled database can silence a process too) or 'never' (its
--   own count says other work still ran in it, which the database cannot see);
-- * it crashed holding several, or was seen dying beside others before (crashed_workers):
--   nobody can tell which one did it, so each gets its attempt back and becomes a suspect
--   (crashes + 1). Its jobs are split in two halves (suspect_group: the smallest id of each),
--   and a worker runs one half with nothing else beside it (job_claim_alone): the half that
--   does not crash again is innocent and done, the one that does is halved again, so a poison
--   job among N is caught alone, and charged, after about log2(N) crashes; its innocent
--   neighbours never are;
-- * its supervisor stopped it (not crashed): the attempt is not charged, like a drain.
-- %(how)s says how it ended ("killed by SIGKILL", "exited with code 1").
with held as (
    select id, crashes from {schema}.jobs
    where state = 'running' and claimed_by = %(worker)s
    for update
), ranked as (
    select id, row_number() over (order by id) as rn, count(*) over () as n from held
), halves as (
    select id, case when n > 1 then min(id) over (partition by 2 * rn <= n + 1) end as half from ranked
), verdict as (
    select count(*) as running,
           exists (select 1 from {schema}.crashed_workers w where w.worker = %(worker)s) as seen_beside
    from held
), judged as (
    select held.id, v.running, h.half,
           %(crashed)s and v.running = 1 and not v.seen_beside
           and (%(charge)s = 'alone' or (%(charge)s = 'suspect' and held.crashes > 0)) as charged
    from held join halves h on h.id = held.id, verdict v
), noted as (
    insert into {schema}.crashed_workers (worker, at)
    select %(worker)s, {now}
    where %(crashed)s and exists (select 1 from judged where not judged.charged)
    on conflict (worker) do nothing
), freed as (
    -- its fleet-wide slots go with it, now rather than at their expiry
    delete from {schema}.job_slots where holder = %(worker)s
), released as (
    update {schema}.jobs j
    set state = case when judged.charged and j.attempt >= j.max_attempts then 'dead' else 'ready' end,
        attempt = case when judged.charged then j.attempt else greatest(j.attempt - 1, 0) end,
        crashes = case when %(crashed)s then j.crashes + 1 else j.crashes end,
        suspect_group = case when %(crashed)s then judged.half else j.suspect_group end,
        run_at = {now},
        finished_at = case when judged.charged and j.attempt >= j.max_attempts then {now} end,
        last_error = case
            when not %(crashed)s
                then 'worker stopped by its supervisor, attempt not counted, ' || %(worker)s
            when judged.charged and j.attempt >= j.max_attempts
                then 'dead: crashed its worker process on the last attempt (' || %(how)s || ', '
                     || %(worker)s || ')'
            when judged.charged
                then 'crashed its worker process (' || %(how)s || ', ' || %(worker)s
                     || '); attempt counted, runs alone next'
            else 'worker process ' || %(how)s || ' (' || %(worker)s || ') running ' || judged.running
                 || ' job(s); attempt not counted, runs apart from other work next' end,
        lease_token = null, lease_expires_at = null
    from judged
    where j.id = judged.id
    returning j.id, j.name, j.queue, j.attempt, j.state, j.last_error, judged.charged
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select released.id, {now},
           case when released.charged then released.attempt else released.attempt + 1 end,
           case when released.state = 'dead' then 'dead' when released.charged then 'crashed'
                when %(crashed)s then 'quarantined' else 'interrupted' end,
           released.last_error
    from released
)
-- the queues answered here are woken with queue_notify
select released.id, released.name, released.queue, released.state,
       case when released.state = 'dead' then 'dead' when released.charged then 'crashed'
            when %(crashed)s then 'quarantined' else 'interrupted' end
from released
order by released.id

-- name: job_wake_due
with due as (
    select id from {schema}.jobs
    where state = 'suspended' and run_at <= {now}
    order by run_at, id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j set state = 'ready'
from due where j.id = due.id
returning j.id, j.queue, j.state

-- name: job_age
-- priority aging (job(aging=)): a ready row of the queue gains one level per step (%(step_us)s
-- microseconds) it has waited since its run_at, counted from the priority it was enqueued at
-- (base_priority, set the first time it moves), down to %(floor)s; a row at or below the floor (an urgent lane, or one
-- that got there) is never touched, and a priority only ever improves (a retried row keeps what
-- it gained, its age counted again from its new run_at). Every claim orders by priority, so
-- each of them sees the new order without a change of its own. The candidates never scan the
-- backlog: the distinct levels above the floor are found one index descent each in
-- jobs_ready_idx (a loose index scan), then each level's oldest %(limit)s rows that waited a
-- step at least (a range on run_at under the level); of those, the rows whose priority changes
-- (only they are probed again by primary key), oldest first, are locked and moved. A level's
-- oldest rows that are not due yet (they came down from further up and need more than a step)
-- can hold back younger ones behind them until they are due themselves: aging is delayed then,
-- never stopped. skip locked: never wait on a claim. bench/aging.py: 0.8 ms a pass over
-- 1,000,000 ready rows of nine levels none of which is due, 23 ms when every level's oldest
-- 1,000 must be read, 48 ms to move 1,000
with recursive levels(p) as (
    (select priority from {schema}.jobs
     where state = 'ready' and queue = %(queue)s and priority > %(floor)s
     order by priority
     limit 1)
    union all
    select (select j.priority from {schema}.jobs j
            where j.state = 'ready' and j.queue = %(queue)s and j.priority > l.p
            order by j.priority
            limit 1)
    from levels l
    where l.p is not null
), candidates as (
    select j.id from levels l cross join lateral (
        select j.id, j.priority, j.base_priority, j.run_at from {schema}.jobs j
        where j.state = 'ready' and j.queue = %(queue)s and j.priority = l.p
          and j.run_at <= {now} - %(step_us)s * interval '1 microsecond'
        order by j.run_at, j.id
        limit %(limit)s
    ) j
    where l.p is not null and {_age_earned}
), picked as (
    select j.id from {schema}.jobs j
    where j.id = any(array(select id from candidates))
      and j.state = 'ready' and j.queue = %(queue)s and j.priority > %(floor)s and {_age_earned}
    order by j.run_at, j.id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j
set priority = least(j.priority, {_aged_priority}), base_priority = coalesce(j.base_priority, j.priority)
where j.id = any(array(select id from picked))
returning j.id

-- name: job_prune
-- the cutoffs are taken on {now}, the database's clock: a worker whose clock runs days ahead
-- must not delete rows that are still inside their retention window. A completed job inside
-- its dedupe window is kept (it holds its key) whatever the retention says. Every delete goes
-- through "id = any(array(...))", as job_claim_one explains: joined against the CTE, the
-- generic plan of the steps delete seq-scanned job_steps (a batch of 1,000 among 200,000
-- finished jobs: 190 ms, against 70 ms through the primary keys)
--
-- The batch is chosen first WITHOUT locking (walking jobs_finished_idx in order, stopping at
-- the limit), then locked by primary key with the same test again (a row requeued meanwhile
-- is not deleted). Chosen and locked in one select, the planner sorted every prunable row
-- instead: with 10,000,000 finished rows a sequential scan and a 300 MB on-disk sort, 4.4 s,
-- cut off by the statement timeout every time, so retention never caught up; now 7 ms
with doomed as (
    select id from {schema}.jobs
    where id = any(array(
            select id from {schema}.jobs
            where state in ('completed', 'dead', 'cancelled')
              and ((state = 'completed'
                    and finished_at < {now} - %(completed_for)s * interval '1 millisecond'
                    and (dedupe_window is null or finished_at + dedupe_window < {now}))
                   or (state in ('dead', 'cancelled')
                       and finished_at < {now} - %(finished_for)s * interval '1 millisecond'))
            order by finished_at, id
            limit %(limit)s))
      and ((state = 'completed'
            and finished_at < {now} - %(completed_for)s * interval '1 millisecond'
            and (dedupe_window is null or finished_at + dedupe_window < {now}))
           or (state in ('dead', 'cancelled')
               and finished_at < {now} - %(finished_for)s * interval '1 millisecond'))
    for update skip locked
), gone as (
    delete from {schema}.jobs j where j.id = any(array(select id from doomed)) returning j.id
), history as (
    delete from {schema}.job_history h where h.job_id = any(array(select id from gone))
), steps as (
    delete from {schema}.job_steps s where s.job_id = any(array(select id from gone))
), fanins as (
    -- a fan-in goes with the job it would wake (a parent, or a batch's callback)
    delete from {schema}.fanins f where f.waiter_id = any(array(select id from gone))
), forgotten as (
    delete from {schema}.crashed_workers w
    where w.at < {now} - %(finished_for)s * interval '1 millisecond'
)
select count(*) from gone

-- name: _operator_filters
-- a fragment, not a statement: the operator's filters (ListFilter), written once for the
-- listings, the bulk verbs and their count, which say {_operator_filters} where it goes
(%(queue)s::text is null or queue = %(queue)s::text)
  and (%(name)s::text is null or name = %(name)s::text)
  and (%(state)s::text is null or state = %(state)s::text)
  and (%(tenant)s::text is null or tenant = %(tenant)s::text)
  and (%(since)s::float8 is null or coalesce(finished_at, created_at) >= to_timestamp(%(since)s::float8 / 1000.0))
  and (%(until)s::float8 is null or coalesce(finished_at, created_at) < to_timestamp(%(until)s::float8 / 1000.0))
  and (%(since_ago)s::float8 is null
       or coalesce(finished_at, created_at) >= {now} - %(since_ago)s::float8 * interval '1 millisecond')
  and (%(until_ago)s::float8 is null
       or coalesce(finished_at, created_at) < {now} - %(until_ago)s::float8 * interval '1 millisecond')
  and (%(error)s::text is null or strpos(lower(last_error), lower(%(error)s::text)) > 0)
  and (%(error_group)s::text is null
       or left(coalesce(last_error, ''), %(width)s::int) = %(error_group)s::text)
  and (%(parent)s::int8 is null or parent_id = %(parent)s::int8)

-- name: job_list
-- operator filters, newest first; the time range reads when a job finished, or was created
-- if it has not: absolute times, or ages taken back from the database's now (so "the last 2h"
-- means the same on every machine); %(before)s pages backwards by id (keyset: no offset over
-- millions of rows)
select id, name, queue, state, attempt, max_attempts, tenant, idempotency_key, priority,
       extract(epoch from run_at)::float8 * 1000, last_error,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from finished_at)::float8 * 1000,
       enqueued_by, claimed_by, extract(epoch from lease_expires_at)::float8 * 1000, crashes, progress
from {schema}.jobs
where {_operator_filters}
  and (%(before)s::int8 is null or id < %(before)s::int8)
order by id desc
limit %(limit)s

-- name: job_list_after
-- the same filters, oldest first after id %(after)s: what xjobsd jobs ls --follow prints next
select id, name, queue, state, attempt, max_attempts, tenant, idempotency_key, priority,
       extract(epoch from run_at)::float8 * 1000, last_error,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from finished_at)::float8 * 1000,
       enqueued_by, claimed_by, extract(epoch from lease_expires_at)::float8 * 1000, crashes, progress
from {schema}.jobs
where {_operator_filters}
  and id > %(after)s::int8
order by id
limit %(limit)s

-- name: job_running
-- the jobs running now, newest started first; only jobs_running_idx is read (it holds the
-- running rows alone, as many as the fleet runs at once), so the sort never meets the
-- finished bulk. %(started_before)s and %(before)s page on by (started_at, id), a keyset; a row
-- written without started_at sorts by when it was created
select id, name, queue, attempt, max_attempts, tenant, claimed_by,
       extract(epoch from coalesce(started_at, created_at))::float8 * 1000,
       extract(epoch from lease_expires_at)::float8 * 1000, progress
from {schema}.jobs
where state = 'running'
  and (%(queue)s::text is null or queue = %(queue)s::text)
  and (%(started_before)s::float8 is null
       or (coalesce(started_at, created_at), id) < (to_timestamp(%(started_before)s::float8 / 1000.0),
                                                    %(before)s::int8))
order by coalesce(started_at, created_at) desc, id desc
limit %(limit)s

-- name: job_get
select id, name, queue, state, attempt, max_attempts, tenant, idempotency_key, priority,
       extract(epoch from run_at)::float8 * 1000, last_error,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from finished_at)::float8 * 1000,
       enqueued_by, claimed_by, extract(epoch from lease_expires_at)::float8 * 1000, crashes, progress, payload,
       traceparent, extract(epoch from started_at)::float8 * 1000, result,
       concurrency_key, key_cap, key_hold, state = 'suspended' and key_run_at is not null,
       -- the holders of its key's places (jobs_key_holders_idx: at most key_cap rows)
       array(select h.id from {schema}.jobs h
             where j.concurrency_key is not null and h.name = j.name and h.concurrency_key = j.concurrency_key
               and h.key_run_at is null
               and (h.state in ('ready', 'running', 'suspended') or (h.state = 'dead' and h.key_hold))
             order by h.id),
       fair_key, snoozes, base_priority
from {schema}.jobs j
where id = %(id)s

-- name: job_history
select extract(epoch from at)::float8 * 1000, attempt, outcome, error, traceback
from {schema}.job_history
where job_id = %(id)s
order by at, seq

-- name: job_cancel
-- a running job's worker is told on the cancel channel %(channel)s, at commit: the holder and
-- the job ({"holder": ..., "ids": [id]}, pg_listen.py); its next renewal is the safety net.
-- A dead member that keeps its key's place (key_hold) can be cancelled too: that lets it go
with target as (
    select id, state, claimed_by from {schema}.jobs
    where id = %(id)s and (state in ('ready', 'running', 'suspended') or (state = 'dead' and key_hold))
    for update
), cancelled as (
    update {schema}.jobs j
    set state = 'cancelled', finished_at = {now},
        last_error = %(reason)s::text, lease_token = null, lease_expires_at = null
    from target t
    where j.id = t.id
    returning j.id, j.attempt, t.state as was, t.claimed_by
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select cancelled.id, {now}, cancelled.attempt, 'cancelled', %(reason)s::text
    from cancelled
    returning job_id
), told as (
    select pg_notify(%(channel)s, json_build_object('holder', claimed_by, 'ids', json_build_array(id))::text)
    from cancelled
    where was = 'running' and octet_length(claimed_by) <= %(holder_bytes)s
)
select logged.job_id from logged, (select count(*) from told) as t

-- name: job_requeue
with requeued as (
    update {schema}.jobs
    set state = 'ready', attempt = 0, snoozes = 0, run_at = {now}, finished_at = null
    where id = %(id)s and state in ('dead', 'cancelled')
    returning id
)
insert into {schema}.job_history (job_id, at, attempt, outcome, error)
select requeued.id, {now}, 0, 'requeued', %(reason)s::text
from requeued
returning job_id

-- name: job_requeue_batch
-- one bounded batch of a bulk retry, after id %(after)s in id order: dead or cancelled jobs
-- matching the filters go back to ready; a job whose key a live job (or another job of this
-- batch) now holds is skipped. Answers every picked id, with whether it was requeued
with picked as (
    select id, name, coalesce(tenant, '') as space, idempotency_key
    from {schema}.jobs
    where state in ('dead', 'cancelled') and id > %(after)s::int8 and id <= %(upto)s::int8 and {_operator_filters}
    order by id
    limit %(limit)s
    for update skip locked
), chosen as (
    select distinct on (p.name, p.space, p.idempotency_key) p.id
    from picked p
    where not exists (
        select 1 from {schema}.jobs l
        where l.state in ('ready', 'running', 'suspended') and l.name = p.name
          and coalesce(l.tenant, '') = p.space and l.idempotency_key = p.idempotency_key)
    order by p.name, p.space, p.idempotency_key, p.id desc
), requeued as (
    update {schema}.jobs j
    set state = 'ready', attempt = 0, snoozes = 0, run_at = {now}, finished_at = null
    where j.id = any(array(select id from chosen))
    returning j.id, j.queue
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select requeued.id, {now}, 0, 'requeued', %(reason)s::text from requeued
)
select p.id, r.queue
from picked p left join requeued r on r.id = p.id
order by p.id

-- name: job_cancel_batch
-- one bounded batch of a bulk cancel, after id %(after)s: live jobs matching the filters. The
-- workers running some are told as job_cancel tells them, ONE notification per holder per
-- batch: its jobs when there are at most %(named)s of them, else none (it checks every run)
with picked as (
    select id, state, claimed_by from {schema}.jobs
    where state in ('ready', 'running', 'suspended') and id > %(after)s::int8 and id <= %(upto)s::int8 and {_operator_filters}
    order by id
    limit %(limit)s
    for update skip locked
), cancelled as (
    update {schema}.jobs j
    set state = 'cancelled', finished_at = {now}, last_error = %(reason)s::text,
        lease_token = null, lease_expires_at = null
    where j.id = any(array(select id from picked))
    returning j.id, j.attempt
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select cancelled.id, {now}, cancelled.attempt, 'cancelled', %(reason)s::text from cancelled
), told as (
    select pg_notify(%(channel)s, case when count(*) <= %(named)s
                                       then json_build_object('holder', claimed_by, 'ids', json_agg(id order by id))
                                       else json_build_object('holder', claimed_by) end::text)
    from picked
    where state = 'running' and octet_length(claimed_by) <= %(holder_bytes)s
    group by claimed_by
)
select cancelled.id from cancelled, (select count(*) from told) as t order by cancelled.id

-- name: job_count_matching
-- what a bulk verb would touch (--dry-run): jobs in %(states)s matching the filters, and the
-- newest id among them (a bulk verb stops there: jobs enqueued after it began are not its)
select count(*), coalesce(max(id), 0)
from {schema}.jobs
where state = any(%(states)s::text[]) and {_operator_filters}

-- name: job_progress_many
-- the latest progress of running jobs, fenced like a renewal: a run that lost its job
-- writes nothing
update {schema}.jobs j
set progress = u.p
from jsonb_to_recordset(%(rows)s::jsonb) as u(id int8, token int8, p jsonb)
where j.id = u.id and j.lease_token = u.token and j.state = 'running'
returning j.id

-- name: queue_set_paused
insert into {schema}.queues (name, paused, changed_at, changed_by)
values (%(queue)s, %(paused)s, {now}, %(by)s)
on conflict (name) do update
    set paused = excluded.paused, changed_at = excluded.changed_at, changed_by = excluded.changed_by
returning name

-- name: queue_control
select name, paused, extract(epoch from changed_at)::float8 * 1000, changed_by
from {schema}.queues
order by name

-- name: job_stats
select queue, state, count(*)
from {schema}.jobs
group by queue, state

-- name: queue_counts
-- per state so each count reads its own partial index and the finished bulk is never scanned;
-- 'quarantined' counts the ready suspects waiting to run alone (jobs_alone_idx)
select queue, 'ready', count(*) from {schema}.jobs where state = 'ready' group by queue
union all
select queue, 'running', count(*) from {schema}.jobs where state = 'running' group by queue
union all
select queue, 'suspended', count(*) from {schema}.jobs where state = 'suspended' group by queue
union all
select queue, 'dead', count(*) from {schema}.jobs where state = 'dead' group by queue
union all
select queue, 'quarantined', count(*) from {schema}.jobs where state = 'ready' and crashes > 0 group by queue

-- name: queue_summary
-- the age is taken on the same clock as run_at, so a skewed worker reports it truly
select queue, count(*),
       ((extract(epoch from {now}) - extract(epoch from min(run_at))) * 1000)::float8
from {schema}.jobs
where state = 'ready' and run_at <= {now}
group by queue

-- name: queue_waiting
-- why live jobs wait, per queue (/metrics xjobs_queue_waiting_jobs): keyed members waiting for their
-- key (a key of concurrency 1 is a sequence), read from jobs_key_waiting_idx; ready jobs due
-- later, read from the ready index as queue_summary reads the due ones: held by their rate key
-- (a rated job due later was moved there by its full window), snoozed, or scheduled. Never a
-- scan of the finished bulk; the order of the cases is the memory driver's too
select queue,
       case when state = 'suspended' then case when key_cap = 1 then 'sequence' else 'key' end
            when rate_key is not null then 'rate'
            when snoozes > 0 then 'snoozed'
            else 'scheduled' end,
       count(*)::int
from {schema}.jobs
where (state = 'suspended' and key_run_at is not null) or (state = 'ready' and run_at > {now})
group by 1, 2

-- name: queue_unknown
-- ready jobs of a name no deployed worker has a body for (%(names)s: the names this daemon's
-- code declares), per queue: claims filter on names, so these wait; /metrics shows them
select queue, count(*)::int
from {schema}.jobs
where state = 'ready' and name <> all(%(names)s::text[])
group by queue

-- name: job_complete_fenced
-- last_error is the error a job stands in now: a completed job has none (an earlier attempt's
-- error stays in its history, as job_ack_many); waiters on its result are told at commit
with done as (
    update {schema}.jobs
    set state = 'completed', finished_at = {now}, last_error = null,
        lease_token = null, lease_expires_at = null, result = %(result)s::jsonb
    where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
    returning id
), told as (
    select pg_notify(%(settled)s, id::text) from done
)
select done.id from done, (select count(*) from told) as t

-- name: job_tenant
-- the first statement of a body's transaction: its run's tenant ('' for a job without one)
-- and whether it declared a cross-tenant write, local to the transaction, for row-level
-- security policies (current_setting('xjobs.tenant', true))
select set_config('xjobs.tenant', %(run_tenant)s, true),
       set_config('xjobs.cross_tenant', %(cross)s, true)

-- name: job_settlement
-- what a waiter on a result reads (settlement.py): the result only of a completed job
select state, last_error, case when state = 'completed' then result end
from {schema}.jobs
where id = %(id)s

-- name: job_settled
-- waiters on results (results.py) are told of jobs that settled dead or cancelled, at commit:
-- each note a comma-separated chunk of ids
select pg_notify(%(settled)s, ids) from unnest(%(notes)s::text[]) as ids

-- name: queue_notify
-- wake idle workers of queues that got jobs back (release, rescue, requeue): the insert
-- trigger only sees new rows
select pg_notify(%(channel)s, q) from unnest(%(queues)s::text[]) as q

-- name: session_count
-- the supervisor waits for a dead child's sessions (application_name = its identity) to end
-- before handing that child's running jobs back
select count(*)
from pg_stat_activity
where application_name = %(application_name)s and datname = current_database()
  and pid <> pg_backend_pid()

-- name: clock_now
-- the database's now, for decisions made in Python on the one clock (cron occurrences)
select (extract(epoch from {now}) * 1000)::float8

-- name: leader_elect
-- take the lease if it is free or expired, or renew it if this holder has it; answers the
-- holder only when that is this one. Fenced on the database's clock
insert into {schema}.scheduler_leader as l (name, holder, expires_at, elected_at)
values (%(election)s, %(holder)s, {now} + %(lease)s * interval '1 millisecond', {now})
on conflict (name) do update
    set holder = excluded.holder, expires_at = excluded.expires_at,
        elected_at = case when l.holder = excluded.holder then l.elected_at else excluded.elected_at end
    where l.holder = excluded.holder or l.expires_at <= {now}
returning holder

-- name: leader_resign
-- hand the lease back: expired now, so the next candidate need not wait it out
update {schema}.scheduler_leader set expires_at = {now}
where name = %(election)s and holder = %(holder)s and expires_at > {now}
returning name

-- name: leader_get
select holder, extract(epoch from expires_at)::float8 * 1000, extract(epoch from elected_at)::float8 * 1000,
       expires_at > {now}
from {schema}.scheduler_leader
where name = %(election)s

-- name: leader_fence
-- inside a dispatch transaction: the lease is still this holder's, and stays so until commit
-- (the row lock makes a rival's election wait for this transaction)
select 1 from {schema}.scheduler_leader
where name = %(election)s and holder = %(holder)s and expires_at > {now}
for update

-- name: schedule_state
select task, watermark_ms, extract(epoch from updated_at)::float8 * 1000, dispatched
from {schema}.scheduler_state
order by task

-- name: schedule_advance
-- move a task's watermark from what the dispatcher read (%(expected)s, null for a task never
-- dispatched) to %(watermark)s: compare-and-set, so two dispatchers of one occurrence cannot
-- both advance it
insert into {schema}.scheduler_state as s (task, watermark_ms, updated_at, dispatched)
values (%(task)s, %(watermark)s, {now}, %(dispatched)s)
on conflict (task) do update
    set watermark_ms = excluded.watermark_ms, updated_at = excluded.updated_at,
        dispatched = s.dispatched + excluded.dispatched
    where s.watermark_ms is not distinct from %(expected)s::bigint
returning task

-- name: outbox_stage
-- in the application's transaction: the rows exist only if it commits. A delay counts from
-- the staging, not from the publish: it becomes an absolute run_at (r, epoch ms) here
insert into {schema}.outbox (staged_at, job)
select {now},
       case when jsonb_typeof(value->'r') is distinct from 'number' and coalesce((value->>'d')::float8, 0) > 0
            then value || jsonb_build_object('r', extract(epoch from {now}) * 1000 + (value->>'d')::float8, 'd', 0)
            else value end
from jsonb_array_elements(%(rows)s::jsonb)
returning id

-- name: outbox_claim
-- a batch as a LEASE, in one statement: stamped where the rows are locked, in (staged_at, id)
-- order; a claim older than %(lease)s is free again (its relay died mid-batch)
with picked as (
    select id from {schema}.outbox
    where published_at is null
      and (claimed_at is null or claimed_at < {now} - %(lease)s * interval '1 millisecond')
    order by staged_at, id
    limit %(limit)s
    for update skip locked
), claimed as (
    update {schema}.outbox o
    set claim_token = %(token)s, claimed_by = %(holder)s, claimed_at = {now}
    where o.id = any(array(select id from picked))
    returning o.id, o.staged_at, o.job
)
select id, job from claimed order by staged_at, id

-- name: outbox_hold
-- the relay's publish transaction first locks the rows its claim still holds: a claim taken
-- over (or already published) is found fenced before anything is enqueued, and while these
-- locks are held no other relay's claim can take the rows (it skips locked rows)
select id from {schema}.outbox
where id = any(%(ids)s::bigint[]) and claim_token = %(token)s and published_at is null
for update

-- name: outbox_publish
-- in the relay's enqueue transaction: only rows this claim still holds and nobody published
update {schema}.outbox o
set published_at = {now}, job_id = u.job_id, claim_token = null
from unnest(%(ids)s::bigint[], %(job_ids)s::bigint[]) as u(id, job_id)
where o.id = u.id and o.claim_token = %(token)s and o.published_at is null
returning o.id

-- name: outbox_release
-- a failed publish hands its batch back, fenced the same way
update {schema}.outbox
set claim_token = null, claimed_by = null, claimed_at = null
where id = any(%(ids)s::bigint[]) and claim_token = %(token)s and published_at is null
returning id

-- name: outbox_prune
with doomed as (
    select id from {schema}.outbox
    where published_at < {now} - %(retention)s * interval '1 millisecond'
    order by published_at, id
    limit %(limit)s
    for update skip locked
), gone as (
    delete from {schema}.outbox o where o.id = any(array(select id from doomed)) returning o.id
)
select count(*) from gone

-- name: outbox_summary
-- what /metrics reads: rows not yet published and the age of the oldest (outbox_pending_idx)
select count(*), coalesce(((extract(epoch from {now}) - extract(epoch from min(staged_at))) * 1000)::float8, 0)
from {schema}.outbox
where published_at is null

-- name: slot_acquire
-- one free slot of a capped job, or none: the lowest slot nobody holds (or whose holder's
-- expiry passed) is inserted or taken over; the primary key settles a race, the loser gets
-- no row and tries again
with free as (
    select s from generate_series(0, %(cap)s - 1) as s
    where not exists (select 1 from {schema}.job_slots l
                      where l.job = %(job)s and l.slot = s and l.expires_at > {now})
    order by s
    limit 1
)
insert into {schema}.job_slots as l (job, slot, holder, expires_at)
select %(job)s, free.s, %(holder)s, {now} + %(lease)s * interval '1 millisecond' from free
on conflict (job, slot) do update
    set holder = excluded.holder, expires_at = excluded.expires_at
    where l.expires_at <= {now}
returning slot

-- name: slot_renew
-- fenced on the holder AND on the slot not having expired: an expired slot may already be
-- somebody else's
update {schema}.job_slots set expires_at = {now} + %(lease)s * interval '1 millisecond'
where job = %(job)s and slot = %(slot)s and holder = %(holder)s and expires_at > {now}
returning slot

-- name: slot_release
delete from {schema}.job_slots
where job = %(job)s and slot = %(slot)s and holder = %(holder)s
returning slot

-- name: slot_held
select job, count(*) from {schema}.job_slots where expires_at > {now} group by job

-- name: job_claim_filtered
-- job_claim_one for a worker with capped jobs (job(concurrency=N), %(caps)s = [{n, c}]) or
-- per-process tenant limits. Left ready: a capped job whose every slot is held, and the jobs
-- of a tenant in %(skip)s (at its ceiling or its rate window full; '' = no tenant). Of what is
-- picked, no more of a capped job than it has free slots, and no more of one tenant than
-- %(tenant_cap)s minus %(held)s (what this worker runs of it): the rest stay ready, so a
-- claim does not take what it would only shed. Only filters: a slot is granted by
-- slot_acquire's primary key, a tenant's room by the worker's limiter
with caps as (
    select c.n, c.c - (select count(*) from {schema}.job_slots l where l.job = c.n and l.expires_at > {now}) as room
    from jsonb_to_recordset(%(caps)s::jsonb) as c(n text, c int)
), held as (
    select h.t, h.n from jsonb_to_recordset(%(held)s::jsonb) as h(t text, n int)
), picked as (
    select id, name, coalesce(tenant, '') as tk, priority, run_at, started_at is not null as started
    from {schema}.jobs j
    where state = 'ready' and queue = %(queue)s and run_at <= {now} and crashes = 0 and {_rate_open}
      and not exists (select 1 from {schema}.queues p where p.name = %(queue)s and p.paused)
      and not exists (select 1 from caps where caps.n = j.name and caps.room <= 0)
      and coalesce(tenant, '') <> all(%(skip)s::text[])
      and (%(names)s::text[] is null or name = any(%(names)s::text[]))
    order by priority, run_at, id
    limit %(limit)s
    for update skip locked
), chosen as (
    select ranked.id from (
        select id, name, tk,
               row_number() over (partition by name order by priority, run_at, id) as nth_of_job,
               row_number() over (partition by tk order by priority, run_at, id) as nth_of_tenant
        from picked) as ranked
    left join caps on caps.n = ranked.name
    left join held on held.t = ranked.tk
    where (caps.n is null or ranked.nth_of_job <= caps.room)
      and (%(tenant_cap)s::int is null or ranked.nth_of_tenant <= %(tenant_cap)s::int - coalesce(held.n, 0))
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now}, progress = null,
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
where j.id = any(array(select id from chosen))
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority, j.traceparent,
          j.snoozes, j.id not in (select id from picked where started)

-- Durable steps and events ----------------------------------------------------------------------
--
-- Every write a run makes to its steps is fenced on its claim: the job row must still be
-- running under the claim's token, and it is LOCKED by the same statement, so a cancel, a
-- rescue or a hand-back that committed first is seen (and one that comes later waits for this
-- write): nothing a run writes lands after it lost its job.

-- name: step_list
-- every recorded step of one job, with now, in ONE statement: a resume at step 4,800 reads
-- once (one row of nulls when the job recorded none)
select (extract(epoch from {now}) * 1000)::float8, s.name, s.kind, s.state, s.seq, s.attempt,
       s.result, extract(epoch from s.started_at)::float8 * 1000,
       extract(epoch from s.finished_at)::float8 * 1000, extract(epoch from s.wake_at)::float8 * 1000,
       s.event, s.event_key, s.timed_out
from (select 1) as one
left join {schema}.job_steps s on s.job_id = %(id)s
order by s.seq

-- name: step_list_many
-- the step_list of many runs at once (pg_step_writes: the first reads of the attempts that
-- arrived while the last batch was being written), one row of nulls per job that recorded none
select (extract(epoch from {now}) * 1000)::float8, ids.id, s.name, s.kind, s.state, s.seq, s.attempt,
       s.result, extract(epoch from s.started_at)::float8 * 1000,
       extract(epoch from s.finished_at)::float8 * 1000, extract(epoch from s.wake_at)::float8 * 1000,
       s.event, s.event_key, s.timed_out
from unnest(%(ids)s::bigint[]) as ids(id)
left join {schema}.job_steps s on s.job_id = ids.id
order by ids.id, s.seq

-- name: step_put
-- a step.run that returned: its result, written before step.run returns (for share: a
-- concurrent settle of the job waits for this write, or this write sees it and writes nothing)
with owner as (
    select id from {schema}.jobs
    where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
    for share
)
insert into {schema}.job_steps as s (job_id, name, kind, state, attempt, result, started_at, finished_at)
select owner.id, %(name)s, 'run', 'completed', %(attempt)s, %(result)s::jsonb,
       {now} - %(duration)s * interval '1 millisecond', {now}
from owner
on conflict (job_id, name) do nothing
returning s.job_id

-- name: step_put_many
-- the step_put of many runs at once (pg_step_writes: the results that arrived while the last
-- batch was being written), one commit for all. rows: a JSON array of (id, token, name,
-- attempt, result as JSON text, duration). Each run's fence is its own: a row whose job is not
-- running under its token writes nothing and the others still land. The rows are locked for
-- share in id order, the order every batch takes them in. Planned per batch, like job_ack_many
with given as (
    select id, token, name, attempt, result, duration
    from jsonb_to_recordset(%(rows)s::jsonb)
         as r(id bigint, token bigint, name text, attempt integer, result text, duration float8)
), owner as (
    select j.id, j.lease_token from {schema}.jobs j
    where j.id = any(%(ids)s::bigint[]) and j.state = 'running'
      and (j.id, j.lease_token) in (select id, token from given)
    order by j.id
    for share
)
insert into {schema}.job_steps as s (job_id, name, kind, state, attempt, result, started_at, finished_at)
select g.id, g.name, 'run', 'completed', g.attempt, g.result::jsonb,
       {now} - g.duration * interval '1 millisecond', {now}
from given g join owner o on o.id = g.id and o.lease_token = g.token
on conflict (job_id, name) do nothing
returning s.job_id, s.name

-- name: step_own
-- the first statement of a sleep's or a wait's transaction: the run still owns its job, and
-- holds its row until the transaction ends
select id from {schema}.jobs
where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
for update

-- name: step_begin
-- record a sleep or a wait the first time it is reached (its wake-up time, or its timeout,
-- counted from now), or read it as it was recorded; answers whether it is due on {now}
insert into {schema}.job_steps as s (job_id, name, kind, state, attempt, started_at, wake_at,
                                     event, event_key)
values (%(id)s, %(name)s, %(kind)s, %(step_state)s, %(attempt)s, {now},
        {now} + %(wake_in)s * interval '1 millisecond', %(event)s, %(key)s)
on conflict (job_id, name) do update set name = s.name
returning s.kind, s.state, s.result, extract(epoch from s.wake_at)::float8 * 1000,
          s.wake_at <= {now}, s.event, s.event_key, s.timed_out

-- name: step_complete
-- a sleep that came due, or a wait that got its event (or timed out): completed with its result
update {schema}.job_steps
set state = 'completed', result = %(result)s::jsonb, timed_out = %(timed_out)s, finished_at = {now},
    attempt = %(attempt)s
where job_id = %(id)s and name = %(name)s
returning job_id

-- name: step_suspend
-- the job waits for its step: suspended until %(wake)s (epoch ms), or %(poll)s ms from now when
-- that is sooner (a wait's event_poll), its attempt not charged (a wait is not a failure and
-- burns no attempt), no error recorded, its lease let go; answers when it wakes
with suspended as (
    update {schema}.jobs
    set state = 'suspended', attempt = greatest(attempt - 1, 0),
        run_at = least(to_timestamp(%(wake)s / 1000.0), {now} + %(poll)s * interval '1 millisecond'),
        lease_token = null, lease_expires_at = null
    where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
    returning id, attempt, run_at
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select suspended.id, {now}, suspended.attempt + 1, 'suspended', null::text
    from suspended
)
select extract(epoch from suspended.run_at)::float8 * 1000 from suspended

-- name: event_lock
-- a send and a wait of one (name, key) take turns: a wait that finds no event suspends before a
-- send can look for waiters, so a send never misses a waiter that is about to suspend. A
-- transaction-scoped lock (released at commit or rollback, never carried by a pooled
-- connection), keyed by schema too: two installs in one database never contend
select pg_advisory_xact_lock(
    hashtextextended('{schema}.event:' || %(name)s || chr(31) || %(key)s, 0))

-- name: event_first
-- the first stored event of (name, key) sent since the job was created: one probe of
-- events_lookup_idx (an older event of that name is somebody else's business)
select e.id, e.payload
from {schema}.events e
where e.name = %(name)s and e.key = %(key)s
  and e.sent_at >= (select created_at from {schema}.jobs where id = %(id)s)
order by e.sent_at, e.id
limit 1

-- name: event_send
-- store the event, complete the waits suspended on it with its payload (delivery is recorded
-- here, so it does not depend on the event still being stored when the job runs) and wake
-- those jobs, all in the sender's transaction: a rolled-back send is never delivered. The
-- woken queues are notified by the same transaction
with sent as (
    insert into {schema}.events (name, key, payload, sent_at)
    values (%(name)s, %(key)s, %(payload)s::jsonb, {now})
    returning id
), suspended as (
    -- locked in id order, as every statement that locks several job rows does
    select j.id, j.attempt from {schema}.jobs j
    join {schema}.job_steps s on s.job_id = j.id
    where s.state = 'waiting' and s.event = %(name)s and s.event_key = %(key)s
      and j.state = 'suspended'
    order by j.id
    for update of j
), delivered as (
    update {schema}.job_steps s
    set state = 'completed', result = %(payload)s::jsonb, finished_at = {now},
        attempt = suspended.attempt + 1
    from suspended
    where s.job_id = suspended.id and s.state = 'waiting' and s.event = %(name)s
      and s.event_key = %(key)s
    returning s.job_id
), woken as (
    update {schema}.jobs j
    set state = 'ready', run_at = {now}
    from suspended
    where j.id = suspended.id and j.state = 'suspended'
    returning j.id, j.queue
), notified as (
    select pg_notify(%(channel)s, q.queue) from (select distinct queue from woken) as q
)
select (select id from sent), (select count(*) from woken), (select count(*) from notified),
       (select count(*) from delivered)

-- name: job_wake_delivered
-- the safety net of the event bus: suspended waits whose event is stored (a send whose snapshot
-- could not see the suspension, or an event inserted by other means) go back to ready; their
-- replay finds the event. Run on the rescue timer, bounded
with due as (
    select j.id from {schema}.jobs j
    join {schema}.job_steps s on s.job_id = j.id and s.state = 'waiting'
    where j.state = 'suspended'
      and exists (select 1 from {schema}.events e
                  where e.name = s.event and e.key = s.event_key and e.sent_at >= j.created_at)
    order by j.id
    limit %(limit)s
    for update of j skip locked
)
update {schema}.jobs j set state = 'ready', run_at = {now}
from due where j.id = due.id
returning j.id, j.queue, j.state

-- name: event_prune
-- events past their retention, oldest first, in a bounded batch (deleted by primary key, as
-- job_prune explains)
with doomed as (
    select id from {schema}.events
    where sent_at < {now} - %(retention)s * interval '1 millisecond'
    order by sent_at, id
    limit %(limit)s
    for update skip locked
), gone as (
    delete from {schema}.events e where e.id = any(array(select id from doomed)) returning e.id
)
select count(*) from gone

-- name: step_reopen
-- xjobsd jobs retry ID --from-step NAME: forget the step and every step recorded after it,
-- and run the job again from its first attempt (a finished run only; its key must be free)
with target as (
    select j.id, s.seq from {schema}.jobs j
    join {schema}.job_steps s on s.job_id = j.id and s.name = %(name)s
    where j.id = %(id)s and j.state in ('completed', 'dead', 'cancelled')
    for update of j
), forgotten as (
    delete from {schema}.job_steps s using target
    where s.job_id = target.id and s.seq >= target.seq
), requeued as (
    update {schema}.jobs j
    set state = 'ready', attempt = 0, snoozes = 0, run_at = {now}, finished_at = null
    from target where j.id = target.id
    returning j.id, j.queue
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select requeued.id, {now}, 0, 'requeued', 'from step ' || %(name)s
    from requeued
)
select requeued.id, requeued.queue from requeued

-- name: job_dead_groups
-- dead letters grouped by queue, job name and the first %(width)s characters of their error
-- (what the error_group filter of the listings and bulk verbs matches exactly), biggest group
-- first; read through jobs_dead_idx (the dead are few beside the finished bulk)
select queue, name, left(coalesce(last_error, ''), %(width)s::int) as error, count(*), max(id),
       extract(epoch from max(finished_at))::float8 * 1000
from {schema}.jobs
where state = 'dead'
group by 1, 2, 3
order by 4 desc, 5 desc
limit %(limit)s

-- name: rate_add
-- what workers report every few seconds: per queue and outcome, how many runs ended since
-- their last report, added to the current minute's row (one statement per report, never one
-- per job)
insert into {schema}.job_rates (queue, minute, outcome, n)
select r.q, date_trunc('minute', {now}), r.o, r.c
from jsonb_to_recordset(%(rates)s::jsonb) as r(q text, o text, c int8)
on conflict (minute, queue, outcome) do update set n = {schema}.job_rates.n + excluded.n
returning queue

-- name: rate_series
-- the minutes since %(since)s ms ago on the database's clock, oldest first
select queue, extract(epoch from minute)::float8 * 1000, outcome, n
from {schema}.job_rates
where minute >= date_trunc('minute', {now} - %(since)s::float8 * interval '1 millisecond')
order by minute, queue, outcome

-- name: rate_prune
delete from {schema}.job_rates
where minute < {now} - %(retention)s::float8 * interval '1 millisecond'
returning queue

-- name: backfill_start
-- a new run's row, or the same run's row adopted by its retry: back to running, keeping the
-- started_at the pass began at and clearing the completion a failed attempt stamped
insert into {schema}.backfills as b (job_id, name, state, rows_swept, started_at, checksum, environment)
values (%(job_id)s, %(name)s, 'running', 0, {now}, %(checksum)s, %(environment)s)
on conflict (job_id) do update
    set state = 'running', completed_at = null, error = null,
        checksum = excluded.checksum, environment = excluded.environment
returning {_backfill_columns}

-- name: backfill_progress
-- absolute: the rows swept so far, so a replayed batch that wrote nothing loses nothing
update {schema}.backfills set rows_swept = %(swept)s
where job_id = %(job_id)s and state = 'running'
returning job_id

-- name: backfill_finish
update {schema}.backfills
set state = %(state)s, rows_swept = %(swept)s, completed_at = {now}, error = %(error)s
where job_id = %(job_id)s
returning job_id

-- name: backfill_list
-- every run, or one name's, oldest first
select {_backfill_columns} from {schema}.backfills
where %(name)s::text is null or name = %(name)s
order by name, started_at, job_id
limit %(limit)s

-- name: _backfill_columns
job_id, name, state, rows_swept, extract(epoch from started_at)::float8 * 1000,
extract(epoch from completed_at)::float8 * 1000, checksum, environment, error

-- name: fanin_find
-- the fan-in a parent's step opened on an earlier attempt, if any: its children exist already
select id, pending from {schema}.fanins where parent_id = %(id)s and step = %(name)s

-- name: fanin_create
-- a parent's step (parent_id, step, waiter = the parent) or a batch (no parent; the waiter is
-- its callback, set by fanin_wait_on); pending starts at the member count and each member's
-- settlement takes one off (jobs_fanin_settle)
insert into {schema}.fanins (parent_id, step, waiter_id, total, pending, created_at)
values (%(parent)s::bigint, %(name)s::text, %(parent)s::bigint, %(total)s, %(total)s, {now})
returning id

-- name: fanin_enqueue
-- one chunk of a fan-out, its rows as ONE json document like job_enqueue; each child's key is
-- the fan-in's prefix and its index, so a child is one per (parent, step, index)
insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, enqueued_by,
                           priority, max_attempts, run_at, created_at, traceparent,
                           parent_id, parent_step, fanin_id, fanin_index, concurrency_key, key_cap, key_hold, fair_key, rate_key)
select u.n, u.q, 'ready', u.p, %(prefix)s::text || coalesce(u.i, 0)::text, u.t, u.e, u.pr, u.m,
       coalesce(to_timestamp(u.r / 1000.0), {now} + u.d * interval '1 millisecond'), {now}, u.tp,
       %(parent)s::bigint, %(step)s::text, %(fanin)s::bigint, u.i, u.ck, u.kc, u.kh, u.fk, u.rk
from jsonb_to_recordset(%(rows)s::jsonb)
     as u(n text, q text, p jsonb, t text, e text, pr int, m int, r float8, d float8, tp text, i int,
          ck text, kc int, kh boolean, fk text, rk text)
returning id

-- name: fanin_members
-- every member of a fan-in in input order: what the parent's step returns, or raises
select fanin_index, id, state, last_error, {_member_result}
from {schema}.jobs
where fanin_id = %(fanin)s
order by fanin_index

-- name: _member_result
result

-- name: batch_callback
-- a batch's callback, inserted suspended with no wake-up time: only its fan-in reaching 0 wakes
-- it (jobs_fanin_settle), with the counts merged into its input
insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, enqueued_by,
                           priority, max_attempts, run_at, created_at, traceparent, fair_key, rate_key)
select u.n, u.q, 'suspended', u.p, u.k, u.t, u.e, u.pr, u.m, to_timestamp(%(wake)s / 1000.0), {now}, u.tp, u.fk, u.rk
from jsonb_to_recordset(%(rows)s::jsonb)
     as u(n text, q text, p jsonb, k text, t text, e text, pr int, m int, tp text, fk text, rk text)
returning id

-- name: fanin_wait_on
update {schema}.fanins set waiter_id = %(waiter)s::bigint where id = %(fanin)s returning id

-- name: fanin_wake_empty
-- a fan-in of no members is settled as it is opened: its waiter is woken at once
with woken as (
    update {schema}.jobs set state = 'ready', run_at = {now},
        payload = payload || jsonb_build_object('batch_id', %(fanin)s::bigint, 'completed', 0, 'dead', 0,
            'cancelled', 0, 'completed_ids', '[]'::jsonb, 'dead_ids', '[]'::jsonb, 'cancelled_ids', '[]'::jsonb)
    where id = %(waiter)s and state = 'suspended'
    returning queue
), counted as (
    update {schema}.fanins set woken = woken + 1, settled_at = {now}
    where id = %(fanin)s and exists (select 1 from woken)
)
select queue from woken

-- name: fanin_get
select id, parent_id, step, waiter_id, total, pending, completed, dead, cancelled, woken,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from settled_at)::float8 * 1000
from {schema}.fanins where id = %(fanin)s

-- name: job_parent
select parent_id, parent_step from {schema}.jobs where id = %(id)s and parent_id is not null

-- name: job_children
-- a job's children counted by state, and the first page of them by id (jobs show, the dashboard)
select null::bigint, state, count(*)::bigint, null::text, null::text
from {schema}.jobs where parent_id = %(id)s group by state
union all
select page.id, page.state, page.n, page.name, page.parent_step from (select id, state, 0::bigint as n, name, parent_step
               from {schema}.jobs where parent_id = %(id)s order by id limit %(limit)s) as page

-- Fair claims across tenants (migration 15) ----------------------------------------------------
--
-- A fair queue's rows carry a fair_key, and fair_tenants holds the keys that may have ready
-- work with the pass of each one's next turn (see the migration). A claim reads the lowest
-- passes and the head of each of those keys' lines, never the backlog behind them.

-- name: job_claim_fair
-- turns: the %(turns)s keys next in the rotation (a claim's limit and a few spare), locked so
-- that two claimers serve different keys rather than wait on each other. A key's k-th due job
-- would start at pass + (k - 1) / weight (weights: [{k, w}], 1 for a key not named); the
-- %(limit)s earliest of those are taken, the rest left as they are (heads reads them unlocked:
-- only the chosen rows are locked, and one a concurrent verb took is skipped). A served key
-- moves on by what it got over its weight; a key whose turn found nothing due (its ready rows
-- are later, suspects, of names this worker lacks, or gone) goes behind every key of this
-- turn, and comes back as an idle row (id null) for fair_forget to remove if it has no ready
-- row left at all; a key with due work that this claim had no room for keeps its pass.
-- Priority orders the jobs within one key, not across keys.
with turns as (
    select t.fair_key, t.pass, coalesce(w.w, 1.0)::float8 as w
    from {schema}.fair_tenants t
    left join jsonb_to_recordset(%(weights)s::jsonb) as w(k text, w float8) on w.k = t.fair_key
    where t.queue = %(queue)s
      and not exists (select 1 from {schema}.queues p where p.name = %(queue)s and p.paused)
    order by t.pass, t.fair_key
    limit %(turns)s
    for no key update of t skip locked
), heads as (
    select h.id, turns.fair_key, turns.pass + (h.nth - 1) / turns.w as at, h.nth
    from turns cross join lateral (
        select j.id, row_number() over (order by j.priority, j.run_at, j.id) as nth
        from (select id, priority, run_at from {schema}.jobs j
              where j.state = 'ready' and j.queue = %(queue)s and j.fair_key = turns.fair_key
                and j.run_at <= {now} and j.crashes = 0 and {_rate_open}
                and (%(names)s::text[] is null or j.name = any(%(names)s::text[]))
              order by j.priority, j.run_at, j.id
              limit %(limit)s) as j) as h
), chosen as (
    select j.id, j.started_at is not null as started from {schema}.jobs j
    where j.id = any(array(select heads.id from heads order by heads.at, heads.fair_key, heads.nth
                           limit %(limit)s))
      and j.state = 'ready'
    for update skip locked
), claimed as (
    update {schema}.jobs j
    set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
        claimed_by = %(worker)s, started_at = {now}, progress = null,
        lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
    where j.id = any(array(select id from chosen))
    returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority,
              j.traceparent, j.fair_key, j.snoozes, j.id not in (select id from chosen where started) as fresh
), served as (
    select fair_key, count(*) as n from claimed group by fair_key
), reach as (
    select greatest(max(turns.pass), max(turns.pass + coalesce(served.n, 0) / turns.w)) as top
    from turns left join served on served.fair_key = turns.fair_key
), moved as (
    update {schema}.fair_tenants t
    set pass = case when served.n is not null then turns.pass + served.n / turns.w
                    else reach.top + 1 / turns.w end
    from turns left join served on served.fair_key = turns.fair_key, reach
    where t.queue = %(queue)s and t.fair_key = turns.fair_key
      and (served.n is not null or not exists (select 1 from heads where heads.fair_key = turns.fair_key))
)
select id, name, queue, payload, tenant, attempt, max_attempts, priority, traceparent, null::text, snoozes, fresh
from claimed
union all
select null, null, null, null, null, null, null, null, null, turns.fair_key, null, null
from turns
where not exists (select 1 from heads where heads.fair_key = turns.fair_key)

-- name: fair_forget_lock
-- the buckets of the idle keys nobody is making ready work in (fair_ready holds its bucket to
-- the end of its transaction): taken first, in a statement of their own, so that
-- fair_forget's snapshot, taken after, sees every ready row of a key it may remove
select k from unnest(%(idle)s::text[]) as k
where pg_try_advisory_xact_lock(hashtext('{schema}.fair_tenants'), hashtext(%(queue)s || '/' || k) & 127)

-- name: fair_forget
-- the idle keys (of those whose bucket fair_forget_lock took) that have no ready row left
delete from {schema}.fair_tenants t
where t.queue = %(queue)s and t.fair_key = any(%(idle)s::text[])
  and not exists (select 1 from {schema}.jobs j
                  where j.state = 'ready' and j.queue = t.queue and j.fair_key = t.fair_key)
returning t.fair_key

-- name: fair_turns
-- a queue's rotation as it stands, lowest pass first (tests, jobs show)
select fair_key, pass from {schema}.fair_tenants where queue = %(queue)s
order by pass, fair_key limit %(limit)s

-- name: fair_place
-- where one due ready job of a fair queue stands (jobs show): its key's due jobs a claim takes
-- before it (jobs_fair_ready_idx, read no further than %(most)s), the keys before its key in the
-- rotation (fair_tenants_turn_idx; null when its key is not in it) and the keys in it. No row
-- for a job not ready and due, without a key, or a suspect of a crash (claimed alone, not in turns)
with job as (
    select id, queue, fair_key, priority, run_at from {schema}.jobs
    where id = %(id)s and state = 'ready' and fair_key is not null and run_at <= {now} and crashes = 0
), turn as (
    select t.pass, t.fair_key from {schema}.fair_tenants t join job on t.queue = job.queue and t.fair_key = job.fair_key
)
select job.fair_key,
       (select count(*) from (select 1 from {schema}.jobs j
                              where j.state = 'ready' and j.queue = job.queue and j.fair_key = job.fair_key
                                and j.run_at <= {now} and j.crashes = 0
                                and (j.priority, j.run_at, j.id) < (job.priority, job.run_at, job.id)
                              limit %(most)s) as a)::int,
       case when exists (select 1 from turn) then
           (select count(*) from {schema}.fair_tenants t, turn
            where t.queue = job.queue and (t.pass, t.fair_key) < (turn.pass, turn.fair_key))::int end,
       (select count(*) from {schema}.fair_tenants t where t.queue = job.queue)::int
from job

-- name: job_debounce
-- debounced enqueues (job(debounce=)), one row per namespace with its newest input, sent before
-- job_enqueue (a burst's key is held) and after it for keys the insert found held: a holder
-- that has not started yet (ready, never claimed) takes that input and starts at
-- least(now + debounce, its first enqueue + debounce_max). Each holder is locked as it is
-- found: a claim that took it first has set started_at, so the lock's recheck matches nothing
-- and the caller answers the enqueue as a duplicate. Found by one probe of the partial unique
-- index per row (the lateral join): joined instead, a table whose statistics say it holds few
-- unstarted rows (a fresh one, or one analysed while its queue was empty) was planned as every
-- ready row against every row of the document, 61 s for a chunk of 5,000 over 15,000 ready jobs
with held as (
    select c.id, u.p, u.db, u.dm
    from jsonb_to_recordset(%(rows)s::jsonb) as u(n text, t text, k text, p jsonb, db float8, dm float8)
    cross join lateral (
        select c.id from {schema}.jobs c
        where c.name = u.n and coalesce(c.tenant, '') = coalesce(u.t, '') and c.idempotency_key = u.k
          and c.state in ('ready', 'running', 'suspended') and c.state = 'ready' and c.started_at is null
        for update of c) c
)
update {schema}.jobs j
set payload = h.p,
    run_at = least({now} + h.db * interval '1 millisecond', j.created_at + h.dm * interval '1 millisecond')
from held h
where j.id = h.id
returning j.id, j.name, coalesce(j.tenant, '') as tenant, j.idempotency_key

-- Rate limits by key ---------------------------------------------------------------------------
--
-- job(rate="N/period", rate_key=...): at most N starts per key in each window of the period,
-- across the fleet. Windows are fixed, counted from the epoch on the database's clock; one row
-- per (job, key) in rate_keys holds the window now counted. rate_take is the grant; the claims'
-- {_rate_open} only keeps a claim from taking what it would be refused.

-- name: _rate_open
-- a job whose key's current window is full is left ready: one probe of rate_keys' primary key
-- per candidate, and none for a job without a rate (written unqualified, so it reads the jobs
-- row of whichever claim it is put in: rate_keys has no column called name or rate_key)
(rate_key is null or not exists (
    select 1 from {schema}.rate_keys rk
    where rk.job = name and rk.key = rate_key and rk.n >= rk.cap
      and rk.opens + rk.period_ms * interval '1 millisecond' > {now}))

-- name: rate_take
-- starts for claimed jobs, as ONE json document (rows of id, token, cap, period in ms), fenced
-- on each claim's token. Per (job, key): the window {now} falls in is opened (or the count goes
-- on in the row's own, if a take that read a later clock got there first), and
-- granted what room it has, the first jobs by id first. A granted job's started_at is inside
-- the window it is counted in (the grant's time, if its claim came before that window opened),
-- so the starts read from jobs agree with the counts. Answers every asked job of a rate key: granted or not, and the ms until its window's
-- next opening. The upserts run in (job, key) order, the one lock order of every taker
with asked as (
    select j.id, a.token, j.name, j.rate_key, a.cap as c, a.period as p
    from jsonb_to_recordset(%(rows)s::jsonb) as a(id bigint, token bigint, cap int, period float8)
    join {schema}.jobs j on j.id = a.id and j.lease_token = a.token and j.state = 'running'
    where j.id = any(%(ids)s::bigint[]) and j.rate_key is not null
), wanted as (
    select w.name, w.rate_key, w.c, w.p, w.want,
           to_timestamp(floor(extract(epoch from {now}) * 1000.0 / w.p) * w.p / 1000.0) as opens
    from (select name, rate_key, max(c) as c, max(p) as p, count(*)::int as want
          from asked group by name, rate_key) as w
    order by w.name, w.rate_key
), taken as (
    insert into {schema}.rate_keys as r (job, key, opens, period_ms, cap, n, granted)
    select name, rate_key, opens, p, c, least(want, c), least(want, c) from wanted
    order by name, rate_key
    on conflict (job, key) do update
    set granted = case when r.period_ms = excluded.period_ms and r.opens >= excluded.opens
                       then greatest(0, least(excluded.granted, excluded.cap - r.n)) else excluded.granted end,
        n = case when r.period_ms = excluded.period_ms and r.opens >= excluded.opens
                 then r.n + greatest(0, least(excluded.granted, excluded.cap - r.n)) else excluded.n end,
        opens = case when r.period_ms = excluded.period_ms and r.opens >= excluded.opens
                     then r.opens else excluded.opens end,
        period_ms = excluded.period_ms, cap = excluded.cap
    returning r.job, r.key, r.granted, r.opens, r.period_ms, r.n, r.cap
), waiting as (
    -- a window this take filled: the key's other due ready jobs (up to %(push)s, in claim order)
    -- move to the window they can start in, the next opening for the first cap of them, the one
    -- after for the next cap, ...: a claim never reads past a full key's backlog, and each
    -- waiting job is moved once, not once a window
    select w.id, t.opens + t.period_ms * interval '1 millisecond'
                 + ((w.place / t.cap) * t.period_ms) * interval '1 millisecond' as due
    from taken t
    cross join lateral (
        select q.id, row_number() over (order by q.priority, q.run_at, q.id) - 1 as place
        from (select j.id, j.priority, j.run_at from {schema}.jobs j
              where j.state = 'ready' and j.name = t.job and j.rate_key = t.key
                and j.run_at < t.opens + t.period_ms * interval '1 millisecond'
              order by j.priority, j.run_at, j.id
              limit %(push)s
              for update skip locked) as q
    ) as w
    where t.n >= t.cap
), pushed as (
    update {schema}.jobs j set run_at = waiting.due
    from waiting
    where j.id = any(array(select id from waiting)) and j.id = waiting.id and j.state = 'ready'
    returning j.id
), ranked as (
    select a.id, a.token, t.opens, t.period_ms,
           row_number() over (partition by a.name, a.rate_key order by a.id) <= t.granted as granted
    from asked a join taken t on t.job = a.name and t.key = a.rate_key
), started as (
    -- only a job claimed before the window it is counted in opened: any other's claim time is
    -- inside that window already (and most takes write no job row)
    update {schema}.jobs j set started_at = greatest({now}, ranked.opens)
    from ranked
    where j.id = any(%(ids)s::bigint[]) and j.id = ranked.id and ranked.granted
      and j.lease_token = ranked.token and j.state = 'running'
      and (j.started_at is null or j.started_at < ranked.opens)
    returning j.id
)
select ranked.id, ranked.granted,
       greatest(0, extract(epoch from ranked.opens - {now}) * 1000.0 + ranked.period_ms)::float8
from ranked, (select count(*) from started) as s, (select count(*) from pushed) as p

-- name: rate_key_wait
-- what a job's rate key says of it (jobs show): its key, the window that key counts now (null
-- when it never started a job, or its row was pruned), and when a ready job is due
select j.rate_key, rk.cap, rk.n, rk.period_ms,
       extract(epoch from rk.opens)::float8 * 1000,
       (extract(epoch from {now}) * 1000)::float8,
       case when j.state = 'ready' then extract(epoch from j.run_at)::float8 * 1000 end
from {schema}.jobs j
left join {schema}.rate_keys rk on rk.job = j.name and rk.key = j.rate_key
where j.id = %(id)s and j.rate_key is not null

-- name: rate_key_prune
-- windows that closed more than %(age)s ms ago: a key that starts again opens a new one
with gone as (
    delete from {schema}.rate_keys
    where opens < {now} - %(age)s * interval '1 millisecond'
      and opens + period_ms * interval '1 millisecond' < {now} - %(age)s * interval '1 millisecond'
    returning 1
)
select count(*) from gone

-- name: _aged_priority
-- what job_age moves a row to: its enqueued priority less one per whole step waited, never
-- below the floor (ages in whole microseconds, as a timestamptz holds them)
greatest(%(floor)s::bigint, coalesce(j.base_priority, j.priority)::bigint
         - (extract(epoch from {now} - j.run_at) * 1000000)::bigint / %(step_us)s::bigint)

-- name: _age_earned
-- whether a row above the floor has earned a better priority than it has: it waited one step more
-- than it already gained, (base - priority + 1) steps (job_age's new priority is then below its
-- own; a comparison of times, not a division per row)
j.run_at <= {now} - (coalesce(j.base_priority, j.priority) - j.priority + 1) * %(step_us)s::bigint
                    * interval '1 microsecond'
