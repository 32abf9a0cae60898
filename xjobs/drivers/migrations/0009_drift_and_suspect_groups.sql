-- Version 9: every database ends as a fresh install does, whichever release installed it; and
-- crash suspects run in halves.
-- compatible-with-previous: yes (it repairs indexes and keys, and adds a column, that version 8's
-- code never names)
--
-- Before migrations, one schema file was re-run on upgrade, and twice it was edited without a
-- new version number; its create ... if not exists statements could add what was missing but
-- never change what existed. Each repair below looks at the catalog first and changes only a
-- database that differs, so on most databases this migration takes no lock on a busy table.

-- Installed by the very first release, before schema versions: claim tokens were uuid. Every
-- later release binds bigint tokens, so such a database has claimed nothing since; a token
-- of that type fences no live claim. Cleared, a job still "running" under one is rescued when
-- its lease lapses, as any job whose worker went away.
do $repair$
begin
    if exists (select from pg_attribute
               where attrelid = '{schema}.jobs'::regclass and attname = 'lease_token'
                 and atttypid = 'uuid'::regtype) then
        alter table {schema}.jobs alter column lease_token type bigint using null;
    end if;
end
$repair$;

-- Installed before schema versions: an index of running jobs by worker, dropped from the schema
-- file without a drop statement (the running index serves the rare release of a worker's jobs).
drop index if exists {schema}.jobs_running_worker_idx;

-- Installed by the first release of version 4: the event lookup without sent_at, so a wait for
-- the first event since its job was created read every older event of its (name, key).
do $repair$
declare
    found regclass := to_regclass('{schema}.events_lookup_idx');
begin
    if found is null or split_part(pg_get_indexdef(found), ' USING ', 2)
                        is distinct from 'btree (name, key, sent_at, id)' then
        drop index if exists {schema}.events_lookup_idx;
        create index events_lookup_idx on {schema}.events (name, key, sent_at, id);
    end if;
end
$repair$;

-- Installed by the first release of version 8: job_rates keyed (queue, minute, outcome), so
-- the chart and the prune, which read by time, scanned every queue's minutes.
do $repair$
begin
    if (select pg_get_constraintdef(c.oid) from pg_constraint c
        where c.conrelid = '{schema}.job_rates'::regclass and c.conname = 'job_rates_pkey')
       is distinct from 'PRIMARY KEY (minute, queue, outcome)' then
        alter table {schema}.job_rates drop constraint if exists job_rates_pkey,
            add constraint job_rates_pkey primary key (minute, queue, outcome);
    end if;
end
$repair$;

-- Which half of a crashed process's jobs a suspect is in (the smallest job id of that half;
-- null: it runs alone). A worker runs one half at a time with nothing else beside it
-- (job_claim_alone), so a poison job among N is caught in about log2(N) crashes instead of N
-- runs one after another. Version 8's code never names it: it claims suspects one by one.
alter table {schema}.jobs add column if not exists suspect_group bigint;
