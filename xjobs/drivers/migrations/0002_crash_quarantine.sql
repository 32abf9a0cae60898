-- Version 2: crash suspects, dedupe windows, progress, crashed workers, queue control.
-- compatible-with-previous: yes (columns with defaults and new tables only)
--
-- Each later migration is what that version's code did to a database it found one version
-- older (it re-ran its whole schema file). Databases installed before schema versions existed
-- also say version 1 but lack the last two things version 1 added, which version 2's code
-- added to them here: job_history.seq (before any later column, so the columns of an upgraded
-- table stand in the order of a fresh one) and jobs_dead_idx. On a version 1 database both
-- statements find them there and change nothing.
alter table {schema}.job_history add column if not exists seq bigint generated always as identity;
create index if not exists jobs_dead_idx on {schema}.jobs (queue) where state = 'dead';

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
