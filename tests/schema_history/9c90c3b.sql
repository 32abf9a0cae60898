-- xjobs schema, installed by xjobsd migrate and at boot under an advisory lock.
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

-- Enqueue wakes idle workers of the queue at once instead of at their next poll.
create or replace function {schema}.notify_ready() returns trigger language plpgsql as $fn$
begin
    perform pg_notify('{channel}', q.queue)
    from (select distinct new_rows.queue from new_rows where new_rows.state = 'ready') as q;
    return null;
end
$fn$;

drop trigger if exists jobs_notify_ready on {schema}.jobs;
create trigger jobs_notify_ready after insert on {schema}.jobs
    referencing new table as new_rows
    for each statement execute function {schema}.notify_ready();

insert into {schema}.meta (key, value) values ('schema_version', '1')
    on conflict (key) do update set value = excluded.value;
