-- Version 14: concurrency by key, and ordered sequences.
-- compatible-with-previous: yes (nullable columns, new indexes and triggers that act on keyed rows only; a member
-- waiting for its key is suspended until 9999-12-31, which older code neither wakes nor claims)
--
-- A job declared with concurrency_key carries its key (concurrency_key), its declared
-- concurrency (key_cap) and whether a dead member keeps its place (key_hold: an ordered job
-- with on_failure="hold"). At most key_cap members of one (name, key) hold a place at once:
-- ready, running or suspended ones, and a dead one that keeps its place. Every other member
-- waits: suspended, its run_at moved to key_run_at and replaced by 9999-12-31, so no claim,
-- no wake-up and no index the claim reads ever walks it. A place is let go by the statement
-- that settles its holder, and that statement's trigger lets the next waiter in, in id order
-- (enqueue order), in the same transaction: nothing polls, and a worker whose every job waits
-- for its key finds nothing to claim rather than claiming and handing back.
alter table {schema}.jobs add column if not exists concurrency_key text;
alter table {schema}.jobs add column if not exists key_cap integer;
alter table {schema}.jobs add column if not exists key_hold boolean;
alter table {schema}.jobs add column if not exists key_run_at timestamptz;

-- the holders of each key's places: at most key_cap rows per key, however many wait
create index if not exists jobs_key_holders_idx on {schema}.jobs (name, concurrency_key)
    where concurrency_key is not null and key_run_at is null
      and (state in ('ready', 'running', 'suspended') or (state = 'dead' and key_hold));
-- the waiters of each key in enqueue order: the next one in is the first entry
create index if not exists jobs_key_waiting_idx on {schema}.jobs (name, concurrency_key, id)
    where state = 'suspended' and key_run_at is not null;

-- Let waiters of one key in while it has room. Every caller takes the keys of its statement
-- in (name, key) order, so two statements never wait on each other's keys; the lock is
-- transaction-scoped, keyed by schema too, and serialises the count against the
-- waiters let in (two enqueues at once could otherwise both see room for one).
create or replace function {schema}.key_admit(job_name text, job_key text) returns void
language plpgsql as $fn$
declare
    head record;
    taken integer;
begin
    perform pg_advisory_xact_lock(hashtextextended('{schema}.key:' || job_name || chr(31) || job_key, 0));
    -- The key is compared as a range, not by "=": ordered by (concurrency_key, id), only
    -- jobs_key_waiting_idx gives the order, and the first waiter is its first entry. With "=",
    -- the planner drops the constant from the order and may walk the primary key instead,
    -- over every older row (finished members and all) until a waiter turns up
    select w.key_cap into head from {schema}.jobs w
    where w.name = job_name and w.concurrency_key between job_key and job_key
      and w.state = 'suspended' and w.key_run_at is not null
    order by w.concurrency_key, w.id limit 1;
    if not found then
        return;   -- nobody waits
    end if;
    select count(*) into taken from {schema}.jobs h
    where h.name = job_name and h.concurrency_key = job_key and h.key_run_at is null
      and (h.state in ('ready', 'running', 'suspended') or (h.state = 'dead' and h.key_hold));
    if taken >= head.key_cap then
        return;
    end if;
    -- locked without skipping, so a waiter that a cancel holds is waited for, never passed
    -- over (order is the point); one that the cancel took away is skipped by the recheck
    with let_in as (
        select w.id from {schema}.jobs w
        where w.name = job_name and w.concurrency_key between job_key and job_key
          and w.state = 'suspended' and w.key_run_at is not null
        order by w.concurrency_key, w.id
        limit head.key_cap - taken
        for update
    ), admitted as (
        update {schema}.jobs j set state = 'ready', run_at = j.key_run_at, key_run_at = null
        where j.id = any(array(select id from let_in))
        returning j.queue
    )
    select count(*) into taken from (select pg_notify('{channel}', q.queue)
                                     from (select distinct queue from admitted) as q) as told;
end
$fn$;

-- A new keyed row, and a keyed row that comes back to life (a requeue, a retry from a step),
-- starts out waiting; the statement's trigger then lets it in if its key has room. A dead
-- member that kept its place keeps it when it is requeued.
create or replace function {schema}.key_wait() returns trigger language plpgsql as $fn$
begin
    new.key_run_at := new.run_at;
    new.run_at := timestamptz '9999-12-31 23:59:59+00';
    new.state := 'suspended';
    return new;
end
$fn$;

drop trigger if exists jobs_key_wait_insert on {schema}.jobs;
create trigger jobs_key_wait_insert before insert on {schema}.jobs
    for each row when (new.concurrency_key is not null and new.state = 'ready')
    execute function {schema}.key_wait();

drop trigger if exists jobs_key_wait_update on {schema}.jobs;
create trigger jobs_key_wait_update before update of state on {schema}.jobs
    for each row
    when (new.concurrency_key is not null and new.state = 'ready'
          and old.state in ('completed', 'dead', 'cancelled') and not (old.state = 'dead' and old.key_hold))
    execute function {schema}.key_wait();

-- A waiting member goes to ready only when its key lets it in (key_admit clears key_run_at in
-- the same update). Anything else that would wake it (an event sent to a wait it was suspended
-- in before it was cancelled and retried) leaves it waiting: what it was woken for is recorded
-- in its steps, and it finds it when its turn comes.
create or replace function {schema}.key_keep_waiting() returns trigger language plpgsql as $fn$
begin
    new.state := 'suspended';
    new.run_at := old.run_at;
    return new;
end
$fn$;

drop trigger if exists jobs_key_keep_waiting on {schema}.jobs;
create trigger jobs_key_keep_waiting before update of state on {schema}.jobs
    for each row
    when (old.state = 'suspended' and old.key_run_at is not null and new.state = 'ready'
          and new.key_run_at is not null)
    execute function {schema}.key_keep_waiting();

-- After a statement: the keys whose rows it inserted waiting, or whose places it let go
-- (a holder completed, died without keeping its place, was cancelled or pruned), or whose
-- rows it put back waiting; each key is looked at once, in (name, key) order.
create or replace function {schema}.key_settle() returns trigger language plpgsql as $fn$
declare
    k record;
begin
    if tg_op = 'INSERT' then
        for k in select distinct n.name, n.concurrency_key as key from new_rows n
                 where n.concurrency_key is not null and n.key_run_at is not null and n.state = 'suspended'
                 order by 1, 2 loop
            perform {schema}.key_admit(k.name, k.key);
        end loop;
    elsif tg_op = 'DELETE' then
        for k in select distinct o.name, o.concurrency_key as key from old_rows o
                 where o.concurrency_key is not null and o.key_run_at is null
                   and (o.state in ('ready', 'running', 'suspended') or (o.state = 'dead' and o.key_hold))
                 order by 1, 2 loop
            perform {schema}.key_admit(k.name, k.key);
        end loop;
    elsif exists (select 1 from new_rows n where n.concurrency_key is not null) then
        -- (every update of jobs comes here, a claim or a renewal too: one look and out)
        for k in select distinct n.name, n.concurrency_key as key
                 from new_rows n join old_rows o on o.id = n.id
                 where n.concurrency_key is not null and n.state is distinct from o.state
                   and (
                       -- a holder let its place go
                       (o.key_run_at is null
                        and (o.state in ('ready', 'running', 'suspended') or (o.state = 'dead' and o.key_hold))
                        and not (n.state in ('ready', 'running', 'suspended') or (n.state = 'dead' and n.key_hold)))
                       -- or a row came back waiting
                       or (n.state = 'suspended' and n.key_run_at is not null
                           and o.state in ('completed', 'dead', 'cancelled')))
                 order by 1, 2 loop
            perform {schema}.key_admit(k.name, k.key);
        end loop;
    end if;
    return null;
end
$fn$;

drop trigger if exists jobs_key_settle_insert on {schema}.jobs;
create trigger jobs_key_settle_insert after insert on {schema}.jobs
    referencing new table as new_rows for each statement execute function {schema}.key_settle();
drop trigger if exists jobs_key_settle_update on {schema}.jobs;
create trigger jobs_key_settle_update after update on {schema}.jobs
    referencing old table as old_rows new table as new_rows for each statement execute function {schema}.key_settle();
drop trigger if exists jobs_key_settle_delete on {schema}.jobs;
create trigger jobs_key_settle_delete after delete on {schema}.jobs
    referencing old table as old_rows for each statement execute function {schema}.key_settle();
