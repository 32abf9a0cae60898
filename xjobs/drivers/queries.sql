-- Every statement of the Postgres driver, one named block each. The driver parses this file
-- at import and prepares statements on first use. {schema} is the configured schema name.
-- {now} is the current time (a timestamptz): the server's statement_timestamp() in
-- production, so leases and due times are measured on one clock however far the workers'
-- clocks drift apart; to_timestamp(%(now)s / 1000.0), from an injected clock, in tests.
-- Durations arrive as milliseconds and are added as intervals; absolute times arrive and
-- leave as epoch milliseconds. No statement reads or returns a whole row.

-- name: job_enqueue
-- the batch arrives as ONE json document (payloads embedded as they were encoded), which the
-- server unpacks in C: far cheaper than binding nine arrays element by element
insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, enqueued_by,
                           priority, max_attempts, run_at, created_at)
-- run_at: the absolute time r when one is given, else now plus the delay d
select u.n, u.q, 'ready', u.p, u.k, u.t, u.e, u.pr, u.m,
       coalesce(to_timestamp(u.r / 1000.0), {now} + u.d * interval '1 millisecond'), {now}
from jsonb_to_recordset(%(rows)s::jsonb)
     as u(n text, q text, p jsonb, k text, t text, e text, pr int, m int, r float8, d float8)
on conflict (name, (coalesce(tenant, '')), idempotency_key)
    where state in ('ready', 'running', 'suspended') do nothing
returning id, name, coalesce(tenant, '') as tenant, idempotency_key

-- name: job_find_live
select j.id, j.name, coalesce(j.tenant, '') as tenant, j.idempotency_key
from {schema}.jobs j
join jsonb_to_recordset(%(keys)s::jsonb) as u(n text, t text, k text)
  on j.name = u.n and coalesce(j.tenant, '') = u.t and j.idempotency_key = u.k
where j.state in ('ready', 'running', 'suspended')

-- name: job_claim_one
with picked as (
    select id from {schema}.jobs
    where state = 'ready' and queue = %(queue)s and run_at <= {now}
    order by priority, run_at, id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now},
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
from picked where j.id = picked.id
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority

-- name: job_claim_many
-- its own statement: queue = any(...) cannot read jobs_ready_idx in order, so a worker
-- claims one queue per statement with job_claim_one and this serves multi-queue callers
with picked as (
    select id from {schema}.jobs
    where state = 'ready' and queue = any(%(queues)s::text[]) and run_at <= {now}
    order by priority, run_at, id
    limit %(limit)s
    for update skip locked
)
update {schema}.jobs j
set state = 'running', attempt = j.attempt + 1, lease_token = %(token)s::bigint,
    claimed_by = %(worker)s, started_at = {now},
    lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
from picked where j.id = picked.id
returning j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts, j.priority

-- name: job_ack_many
update {schema}.jobs j
set state = 'completed', finished_at = {now},
    lease_token = null, lease_expires_at = null
from unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) as a(id, token)
where j.id = a.id and j.lease_token = a.token and j.state = 'running'
returning j.id

-- name: job_nack
with settled as (
    update {schema}.jobs
    set state = case when %(dead)s then 'dead' when %(park)s then 'suspended' else 'ready' end,
        attempt = case when %(counts)s then attempt else greatest(attempt - 1, 0) end,
        run_at = case when %(dead)s then run_at else {now} + %(delay)s * interval '1 millisecond' end,
        finished_at = case when %(dead)s then {now} end,
        last_error = coalesce(%(error)s::text, last_error),
        lease_token = null, lease_expires_at = null
    where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
    returning id, attempt
)
insert into {schema}.job_history (job_id, at, attempt, outcome, error)
select settled.id, {now},
       case when %(counts)s then settled.attempt else settled.attempt + 1 end,
       %(outcome)s, %(error)s::text
from settled
returning job_id

-- name: job_heartbeat_many
update {schema}.jobs j
set lease_expires_at = {now} + %(lease)s * interval '1 millisecond'
from unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) as a(id, token)
where j.id = a.id and j.lease_token = a.token and j.state = 'running'
returning j.id

-- name: job_rescue_lapsed
-- the attempt that lapsed is written to the history like any other, in the same statement
with lapsed as (
    select id from {schema}.jobs
    where state = 'running' and lease_expires_at < {now}
    order by lease_expires_at, id
    limit %(limit)s
    for update skip locked
), rescued as (
    update {schema}.jobs j
    set state = case when j.attempt >= j.max_attempts then 'dead' else 'ready' end,
        run_at = {now},
        finished_at = case when j.attempt >= j.max_attempts then {now} end,
        last_error = case when j.attempt >= j.max_attempts
                          then 'dead: lease expired on the last attempt, held by ' || coalesce(j.claimed_by, '?')
                          else 'lease expired, held by ' || coalesce(j.claimed_by, '?') end,
        lease_token = null, lease_expires_at = null
    from lapsed where j.id = lapsed.id
    returning j.id, j.attempt, j.state, j.last_error, j.queue
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select rescued.id, {now}, rescued.attempt,
           case when rescued.state = 'dead' then 'dead' else 'lapsed' end, rescued.last_error
    from rescued
)
-- the queues answered here are woken with queue_notify
select rescued.id, rescued.queue, rescued.state from rescued

-- name: job_release_worker
-- a worker process that died: its running jobs go back now, fenced on its identity. A crash
-- counts the attempt (the job may be what killed it) and dead-letters on the last one; a
-- process its supervisor stopped (counts false) gives the attempt back, like a drain
with released as (
    update {schema}.jobs j
    set state = case when %(counts)s and j.attempt >= j.max_attempts then 'dead' else 'ready' end,
        attempt = case when %(counts)s then j.attempt else greatest(j.attempt - 1, 0) end,
        run_at = {now},
        finished_at = case when %(counts)s and j.attempt >= j.max_attempts then {now} end,
        last_error = case when %(counts)s and j.attempt >= j.max_attempts
                          then 'dead: worker died on the last attempt, ' || %(worker)s
                          when %(counts)s then 'worker died, ' || %(worker)s
                          else 'worker stopped by its supervisor, attempt not counted, ' || %(worker)s end,
        lease_token = null, lease_expires_at = null
    where j.state = 'running' and j.claimed_by = %(worker)s
    returning j.id, j.attempt, j.state, j.last_error, j.queue
), logged as (
    insert into {schema}.job_history (job_id, at, attempt, outcome, error)
    select released.id, {now},
           case when %(counts)s then released.attempt else released.attempt + 1 end,
           case when released.state = 'dead' then 'dead' when %(counts)s then 'lapsed'
                else 'interrupted' end,
           released.last_error
    from released
)
-- the queues answered here are woken with queue_notify
select released.id, released.queue, released.state from released

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

-- name: job_prune
with doomed as (
    select id from {schema}.jobs
    where (state = 'completed' and finished_at < to_timestamp(%(completed_before)s / 1000.0))
       or (state in ('dead', 'cancelled') and finished_at < to_timestamp(%(finished_before)s / 1000.0))
    order by finished_at, id
    limit %(limit)s
    for update skip locked
), gone as (
    delete from {schema}.jobs j using doomed where j.id = doomed.id returning j.id
), history as (
    delete from {schema}.job_history h using gone where h.job_id = gone.id
)
select count(*) from gone

-- name: job_list
select id, name, queue, state, attempt, max_attempts, tenant, idempotency_key, priority,
       extract(epoch from run_at)::float8 * 1000, last_error,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from finished_at)::float8 * 1000,
       enqueued_by, claimed_by, extract(epoch from lease_expires_at)::float8 * 1000
from {schema}.jobs
where (%(queue)s::text is null or queue = %(queue)s::text)
  and (%(name)s::text is null or name = %(name)s::text)
  and (%(state)s::text is null or state = %(state)s::text)
order by id desc
limit %(limit)s

-- name: job_get
select id, name, queue, state, attempt, max_attempts, tenant, idempotency_key, priority,
       extract(epoch from run_at)::float8 * 1000, last_error,
       extract(epoch from created_at)::float8 * 1000, extract(epoch from finished_at)::float8 * 1000,
       enqueued_by, claimed_by, extract(epoch from lease_expires_at)::float8 * 1000, payload
from {schema}.jobs
where id = %(id)s

-- name: job_history
select extract(epoch from at)::float8 * 1000, attempt, outcome, error
from {schema}.job_history
where job_id = %(id)s
order by at, seq

-- name: job_cancel
with cancelled as (
    update {schema}.jobs
    set state = 'cancelled', finished_at = {now},
        last_error = %(reason)s::text, lease_token = null, lease_expires_at = null
    where id = %(id)s and state in ('ready', 'running', 'suspended')
    returning id, attempt
)
insert into {schema}.job_history (job_id, at, attempt, outcome, error)
select cancelled.id, {now}, cancelled.attempt, 'cancelled', %(reason)s::text
from cancelled
returning job_id

-- name: job_requeue
with requeued as (
    update {schema}.jobs
    set state = 'ready', attempt = 0, run_at = {now}, finished_at = null
    where id = %(id)s and state in ('dead', 'cancelled')
    returning id
)
insert into {schema}.job_history (job_id, at, attempt, outcome, error)
select requeued.id, {now}, 0, 'requeued', null::text
from requeued
returning job_id

-- name: job_stats
select queue, state, count(*)
from {schema}.jobs
group by queue, state

-- name: queue_counts
-- per state so each count reads its own partial index and the finished bulk is never scanned
select queue, 'ready', count(*) from {schema}.jobs where state = 'ready' group by queue
union all
select queue, 'running', count(*) from {schema}.jobs where state = 'running' group by queue
union all
select queue, 'suspended', count(*) from {schema}.jobs where state = 'suspended' group by queue
union all
select queue, 'dead', count(*) from {schema}.jobs where state = 'dead' group by queue

-- name: queue_summary
-- the age is taken on the same clock as run_at, so a skewed worker reports it truly
select queue, count(*),
       ((extract(epoch from {now}) - extract(epoch from min(run_at))) * 1000)::float8
from {schema}.jobs
where state = 'ready' and run_at <= {now}
group by queue

-- name: job_complete_fenced
update {schema}.jobs
set state = 'completed', finished_at = {now},
    lease_token = null, lease_expires_at = null
where id = %(id)s and lease_token = %(token)s::bigint and state = 'running'
returning id

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
