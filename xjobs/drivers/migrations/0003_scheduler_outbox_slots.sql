-- Version 3: the scheduler's leader and watermarks, the transactional outbox, job slots.
-- compatible-with-previous: yes (new tables only)
--
-- The first release of version 2 had no crashed_workers table (it was added to version 2
-- without a new number); version 3's code created it on those databases, and so does this.
create table if not exists {schema}.crashed_workers (
    worker text primary key,
    at     timestamptz not null
);

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
