-- Version 16: fleet-wide rate limits by key, job(rate="100/1m", rate_key=...).
-- compatible-with-previous: yes (a nullable column and a new table)

-- The rate key a job's input gave at enqueue (null: the job declares no rate). Kept on the row,
-- so the claim, the grant and jobs show read the key the job was enqueued with, whatever a
-- later deploy's function would say.
alter table {schema}.jobs add column if not exists rate_key text;

-- One row per (job, key): the window its starts are counted in. Windows are fixed, period_ms
-- long, counted from the epoch on the database's clock; a take in a later window starts the
-- count again in place (one row per key, never one per window). n is what the window has
-- granted, at most cap; granted is what the latest take granted, which the take's RETURNING
-- reads back (an upsert cannot return the count it replaced). The primary key serialises the
-- takes of one key across the fleet: nothing reads a count and then acts on it.
create table if not exists {schema}.rate_keys (
    job       text        not null,
    key       text        not null,
    opens     timestamptz not null,
    period_ms float8      not null check (period_ms > 0),
    cap       integer     not null check (cap > 0),
    n         integer     not null check (n >= 0),
    granted   integer     not null default 0,
    primary key (job, key)
);
-- the prune reads by time
create index if not exists rate_keys_opens_idx on {schema}.rate_keys (opens);

-- A take that fills a key's window moves the key's other due ready jobs to the windows they
-- can start in (queries.sql, rate_take): they are found here in claim order, not by a scan of
-- the queue. Only rows of a rate are in it.
create index if not exists jobs_rate_wait_idx on {schema}.jobs (name, rate_key, priority, run_at, id)
    where state = 'ready' and rate_key is not null;
