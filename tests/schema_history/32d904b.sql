-- xjobs schema, installed by xjobsd migrate and at boot under an advisory lock, only when
-- meta.schema_version is missing or older than {version} (sql.SCHEMA_VERSION): the statements
-- below lock the jobs table, which a daemon booting against a current schema must not do.
-- The placeholder {schema} is replaced by the configured schema name (a checked identifier).
-- Shipped tables grow only through alter table ... add column if not exists further down
-- because create table if not exists is a no-op against an existing database.

create schema if not exists {schema};

create table if not exists {schema}.meta (
    key   text primary key,
    value text not null
);

create table if not exists {schema}.jobs (
    id               bigint generated always as identity primary key,
    name             text        not null,
    queue            text        not null,
    state            text        not null,
    payload          jsonb       not null,
    tenant           text,
    enqueued_by      text,
    idempotency_key  text        not null,
    priority         integer     not null default 0,
    attempt          integer     not null default 0,
    max_attempts     integer     not null,
    run_at           timestamptz not null,
    lease_token      bigint,
    claimed_by       text,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz not null,
    started_at       timestamptz,
    finished_at      timestamptz,
    constraint jobs_state_known check (state in ('ready', 'running', 'suspended', 'completed', 'dead', 'cancelled')),
    constraint jobs_attempt_range check (attempt >= 0 and max_attempts >= 1)
);

-- Hot indexes hold live rows only so millions of finished rows cost the claim nothing.
create index if not exists jobs_ready_idx on {schema}.jobs (queue, priority, run_at, id) where state = 'ready';
create index if not exists jobs_running_idx on {schema}.jobs (lease_expires_at) where state = 'running';
create index if not exists jobs_suspended_idx on {schema}.jobs (run_at) where state = 'suspended';
create index if not exists jobs_dead_idx on {schema}.jobs (queue) where state = 'dead';
create index if not exists jobs_finished_idx on {schema}.jobs (finished_at) where state in ('completed', 'dead', 'cancelled');

-- The idempotency namespace is (name, tenant or empty, key) over live rows. The conflict
-- target in the enqueue statement spells this expression exactly, and so does the live-row
-- lookup: coalesce because two null tenants never compare equal in a unique index.
create unique index if not exists jobs_idempotency_idx
    on {schema}.jobs (name, (coalesce(tenant, '')), idempotency_key)
    where state in ('ready', 'running', 'suspended');

-- What happened to a job besides its current row: failures, interruptions, operator verbs.
create table if not exists {schema}.job_history (
    job_id  bigint      not null,
    at      timestamptz not null,
    attempt integer     not null,
    outcome text        not null,
    error   text
);
create index if not exists job_history_job_idx on {schema}.job_history (job_id);
-- Events of one job can share a timestamp (one clock reading, a coarse clock); seq keeps
-- them in the order they were written.
alter table {schema}.job_history add column if not exists seq bigint generated always as identity;

-- Version 2 ------------------------------------------------------------------------------------

-- How many worker-process crashes caught this job running. A job with crashes > 0 is a
-- suspect: it is claimed only by a worker that runs it ALONE, so a job that kills its process
-- takes no neighbour down with it, and a crash of a process running one job alone is that
-- job's own (its attempt counts). Cleared once a run ends on its own (returns or raises).
alter table {schema}.jobs add column if not exists crashes integer not null default 0;
create index if not exists jobs_alone_idx on {schema}.jobs (queue, priority, run_at, id)
    where state = 'ready' and crashes > 0;

-- job(dedupe_window=...): how long a completed job keeps its idempotency key. Only rows of
-- jobs that declare a window enter this index, so the lookup costs "live only" jobs nothing.
alter table {schema}.jobs add column if not exists dedupe_window interval;
create index if not exists jobs_dedupe_idx
    on {schema}.jobs (name, (coalesce(tenant, '')), idempotency_key)
    where state = 'completed' and dedupe_window is not null;

-- ctx.progress(done, total, note): the latest report of a running job, as JSON.
alter table {schema}.jobs add column if not exists progress jsonb;

-- Worker processes seen to crash (or lapse) with more than one job running. The jobs of one
-- dead process may be handed back in several statements (a sweep's limit, leases that end at
-- different times): once its death was judged "beside others", none of its jobs is charged.
create table if not exists {schema}.crashed_workers (
    worker text primary key,
    at     timestamptz not null
);

-- Queue control, fleet-wide: a paused queue is claimed by no worker anywhere.
create table if not exists {schema}.queues (
    name       text primary key,
    paused     boolean     not null default false,
    changed_at timestamptz not null,
    changed_by text
);

-- Version 3 ------------------------------------------------------------------------------------

-- The scheduler's leader: ONE row per election, held by the daemon whose lease has not expired
-- on the database's clock (never a session advisory lock: a pooled connection would carry it
-- to whoever borrows it next).
create table if not exists {schema}.scheduler_leader (
    name       text primary key,
    holder     text        not null,
    expires_at timestamptz not null,
    elected_at timestamptz not null
);

-- Per cron task, the time up to which its occurrences are dispatched (epoch ms: compared for
-- equality as the fence of every advance, so never a float). Advanced in the same transaction
-- as the enqueue of what it covers, and only while the leader row is held.
create table if not exists {schema}.scheduler_state (
    task         text primary key,
    watermark_ms bigint      not null,
    updated_at   timestamptz not null,
    dispatched   bigint      not null default 0
);

-- The transactional outbox: a job staged in the application's transaction, as the enqueue
-- statement's own row document; the relay claims rows as a LEASE (claimed_at, claim_token),
-- enqueues them and marks them published in one transaction.
create table if not exists {schema}.outbox (
    id           bigint generated always as identity primary key,
    staged_at    timestamptz not null,
    job          jsonb       not null,
    claim_token  bigint,
    claimed_by   text,
    claimed_at   timestamptz,
    published_at timestamptz,
    job_id       bigint
);
create index if not exists outbox_pending_idx on {schema}.outbox (staged_at, id) where published_at is null;
create index if not exists outbox_published_idx on {schema}.outbox (published_at) where published_at is not null;

-- job(concurrency=N): one row per HELD slot; the primary key serialises the grant (nothing
-- reads a count and then acts on it), and a slot whose holder stopped renewing is free again
-- once it expires.
create table if not exists {schema}.job_slots (
    job        text        not null,
    slot       integer     not null,
    holder     text        not null,
    expires_at timestamptz not null,
    primary key (job, slot)
);

-- Version 4 ------------------------------------------------------------------------------------

-- Durable steps: one row per step a job recorded (ctx.step.run / sleep / wait_for_event).
-- A completed step's result is written here BEFORE step.run returns, fenced on the job's
-- claim token, and every later attempt reads the job's rows in ONE statement and replays
-- them. seq orders a job's steps as they were first recorded (retry --from-step re-opens a
-- step and every one recorded after it). Deleted with their job (prune).
create table if not exists {schema}.job_steps (
    job_id      bigint      not null,
    name        text        not null,
    kind        text        not null,
    state       text        not null,
    seq         bigint generated always as identity,
    attempt     integer     not null,
    result      jsonb,
    started_at  timestamptz not null,
    finished_at timestamptz,
    wake_at     timestamptz,
    event       text,
    event_key   text,
    timed_out   boolean     not null default false,
    primary key (job_id, name),
    constraint job_steps_kind_known check (kind in ('run', 'sleep', 'wait')),
    constraint job_steps_state_known check (state in ('completed', 'sleeping', 'waiting'))
);
-- the parked waiters of one event and key: what a send wakes, in the send's transaction
create index if not exists job_steps_waiting_idx on {schema}.job_steps (event, event_key)
    where state = 'waiting';

-- The event bus of step.wait_for_event: stored, so an event sent after a job was enqueued but
-- before it started waiting is still delivered; kept for event_retention, pruned in bounded
-- batches. A wait reads the first event of its (name, key) sent since its job was created:
-- one probe of events_lookup_idx however many other events are stored.
create table if not exists {schema}.events (
    id       bigint generated always as identity primary key,
    name     text        not null,
    key      text        not null,
    payload  jsonb       not null,
    sent_at  timestamptz not null
);
create index if not exists events_lookup_idx on {schema}.events (name, key, sent_at, id);
create index if not exists events_sent_idx on {schema}.events (sent_at);

-- Staging wakes the relay at once instead of at its next poll.
create or replace function {schema}.notify_outbox() returns trigger language plpgsql as $fn$
begin
    perform pg_notify('{channel}_outbox', '');
    return null;
end
$fn$;
drop trigger if exists outbox_notify on {schema}.outbox;
create trigger outbox_notify after insert on {schema}.outbox
    for each statement execute function {schema}.notify_outbox();

-- Enqueue wakes idle workers of the queue at once instead of at their next poll.
create or replace function {schema}.notify_ready() returns trigger language plpgsql as $fn$
begin
    perform pg_notify('{channel}', q.queue)
    from (select distinct new_rows.queue from new_rows where new_rows.state = 'ready') as q;
    return null;
end
$fn$;

-- drop and create (create or replace trigger needs PostgreSQL 14); the drop takes an access
-- exclusive lock, one more reason this file runs only to install or upgrade
drop trigger if exists jobs_notify_ready on {schema}.jobs;
create trigger jobs_notify_ready after insert on {schema}.jobs
    referencing new table as new_rows
    for each statement execute function {schema}.notify_ready();

insert into {schema}.meta (key, value) values ('schema_version', '{version}')
    on conflict (key) do update set value = excluded.value;
