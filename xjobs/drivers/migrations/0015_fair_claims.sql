-- Version 15: fair claims across tenants (job(fairness=...)).
-- compatible-with-previous: yes (a nullable column, a partial index and a table the previous code never reads)

-- The key a fair job is shared out by (its tenant, or what its key function answered); NULL
-- for every job that claims first in, first out. It never changes once the row is written.
-- Collation "C": the rotation breaks ties by key, in the same order on every database.
alter table {schema}.jobs add column if not exists fair_key text collate "C";

-- The head of each key's line, in the claim order within one key: a fair claim reads the
-- first due rows of the keys whose turn it is here, never the queue's whole backlog.
create index if not exists jobs_fair_ready_idx on {schema}.jobs (queue, fair_key, priority, run_at, id)
    where state = 'ready' and fair_key is not null;

-- The keys of a queue that may have ready work, each with its place in the rotation: pass
-- is the virtual time of its next turn (a claim of n of its jobs moves it n / weight on). A
-- key is added by the statement that makes one of its rows ready, and removed by the claimer
-- that finds it has none left (fair_forget). A claim reads the few lowest passes only.
create table if not exists {schema}.fair_tenants (
    queue    text   not null,
    fair_key text   collate "C" not null,
    pass     float8 not null,
    primary key (queue, fair_key)
);
create index if not exists fair_tenants_turn_idx on {schema}.fair_tenants (queue, pass, fair_key);
-- A few rows, each rewritten by every claim that serves its key (pass is in an index, so the
-- update is never HOT): vacuumed after every thousand dead versions, not a fifth of the table.
alter table {schema}.fair_tenants set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

-- Runs inside every statement that makes a fair row ready (an enqueue, a retry, a rescue, a
-- release, a requeue, a wake): its key joins the rotation at the queue's lowest pass, so a key
-- that just got work is served next rather than after every key that was busy before it.
-- The shared advisory lock (one of 128 buckets per schema, held to the end of the transaction)
-- keeps fair_forget from removing the key while this transaction's ready rows are invisible
-- to it; a key already present costs one index probe, and writes nothing. After the row is
-- written, so an enqueue refused as a duplicate adds no key.
create or replace function {schema}.fair_ready() returns trigger language plpgsql as $fn$
begin
    perform pg_advisory_xact_lock_shared(hashtext('{schema}.fair_tenants'),
                                         hashtext(new.queue || '/' || new.fair_key) & 127);
    if not exists (select 1 from {schema}.fair_tenants t
                   where t.queue = new.queue and t.fair_key = new.fair_key) then
        insert into {schema}.fair_tenants (queue, fair_key, pass)
        select new.queue, new.fair_key, coalesce(min(a.pass), 0)
        from {schema}.fair_tenants a where a.queue = new.queue
        on conflict (queue, fair_key) do nothing;
    end if;
    return null;
end
$fn$;

drop trigger if exists jobs_fair_insert on {schema}.jobs;
create trigger jobs_fair_insert after insert on {schema}.jobs
    for each row when (new.fair_key is not null and new.state = 'ready')
    execute function {schema}.fair_ready();
drop trigger if exists jobs_fair_ready on {schema}.jobs;
create trigger jobs_fair_ready after update of state on {schema}.jobs
    for each row when (new.fair_key is not null and new.state = 'ready' and old.state <> 'ready')
    execute function {schema}.fair_ready();
