-- Version 12: workflows: child jobs, fan-out/fan-in, batches, cascading cancel.
-- compatible-with-previous: yes (nullable columns, a new table, a trigger that acts on new rows only)

-- A child knows its parent and the step that made it (cascade, jobs ls --parent), and the
-- fan-in it counts towards with its place among the inputs (results in input order).
alter table {schema}.jobs add column if not exists parent_id bigint;
alter table {schema}.jobs add column if not exists parent_step text;
alter table {schema}.jobs add column if not exists fanin_id bigint;
alter table {schema}.jobs add column if not exists fanin_index integer;
create index if not exists jobs_parent_idx on {schema}.jobs (parent_id, id) where parent_id is not null;
create index if not exists jobs_fanin_idx on {schema}.jobs (fanin_id, fanin_index) where fanin_id is not null;

-- One row per fan-in: a parent's invoke or map step (parent_id, step), or a batch (both
-- null). pending counts the members not settled yet; the settlement that takes it to 0 wakes
-- waiter_id (the parent, or the batch's callback job) in the same transaction.
create table if not exists {schema}.fanins (
    id         bigint generated always as identity primary key,
    parent_id  bigint,
    step       text,
    waiter_id  bigint,
    total      integer     not null check (total >= 0),
    pending    integer     not null check (pending >= 0),
    completed  integer     not null default 0,
    dead       integer     not null default 0,
    cancelled  integer     not null default 0,
    created_at timestamptz not null,
    settled_at timestamptz,
    woken      integer     not null default 0
);
create unique index if not exists fanins_step_idx on {schema}.fanins (parent_id, step) where parent_id is not null;

-- a parent's invoke or map is a step of kind map; the check is re-added wider in the same
-- statement, so every kind the previous code writes still passes
alter table {schema}.job_steps drop constraint if exists job_steps_kind_known,
    add constraint job_steps_kind_known check (kind in ('run', 'sleep', 'wait', 'map'));

-- Runs inside the statement that settles a member (ack, nack to dead, rescue, release, cancel)
-- or re-opens one (requeue): one update of its fan-in row per member, and at 0 one wake.
-- The time is the member's finished_at, which that statement set from its own clock.
create or replace function {schema}.fanin_settle() returns trigger language plpgsql as $fn$
declare
    at timestamptz := coalesce(new.finished_at, statement_timestamp());
    live_now boolean := new.state in ('ready', 'running', 'suspended');
    f record;
    woke_queue text;
    told integer;
begin
    if new.fanin_id is not null then
        update {schema}.fanins s
        set pending = s.pending + case when live_now then 1 else -1 end,
            completed = s.completed + (new.state = 'completed')::int - (old.state = 'completed')::int,
            dead = s.dead + (new.state = 'dead')::int - (old.state = 'dead')::int,
            cancelled = s.cancelled + (new.state = 'cancelled')::int - (old.state = 'cancelled')::int,
            settled_at = case when not live_now and s.pending = 1 then at end
        where s.id = new.fanin_id
        returning s.id, s.waiter_id, s.pending, s.parent_id, s.completed, s.dead, s.cancelled into f;
        if f.pending = 0 and f.waiter_id is not null then
            update {schema}.jobs j
            set state = 'ready', run_at = at,
                payload = case when f.parent_id is not null then j.payload
                               else j.payload || jsonb_build_object(
                                   'batch_id', f.id, 'completed', f.completed, 'dead', f.dead,
                                   'cancelled', f.cancelled,
                                   'completed_ids', (select coalesce(jsonb_agg(m.id order by m.id), '[]')
                                                     from {schema}.jobs m where m.fanin_id = f.id and m.state = 'completed'),
                                   'dead_ids', (select coalesce(jsonb_agg(m.id order by m.id), '[]')
                                                from {schema}.jobs m where m.fanin_id = f.id and m.state = 'dead'),
                                   'cancelled_ids', (select coalesce(jsonb_agg(m.id order by m.id), '[]')
                                                     from {schema}.jobs m where m.fanin_id = f.id and m.state = 'cancelled'))
                          end
            where j.id = f.waiter_id and j.state = 'suspended'
            returning j.queue into woke_queue;
            if woke_queue is not null then
                update {schema}.fanins s set woken = s.woken + 1 where s.id = f.id;
                perform pg_notify('{channel}', woke_queue);
            end if;
        end if;
    end if;
    if new.state = 'cancelled' then
        -- a cancelled parent takes its live children with it; each child's own cancel fires
        -- this trigger again, so the cascade goes down the whole tree
        with doomed as (
            select c.id, c.state, c.claimed_by from {schema}.jobs c
            where c.parent_id = new.id and c.state in ('ready', 'running', 'suspended')
            order by c.id
            for update
        ), cancelled as (
            update {schema}.jobs c
            set state = 'cancelled', finished_at = at, lease_token = null, lease_expires_at = null,
                last_error = 'cancelled with its parent job ' || new.id
            from doomed d where c.id = d.id
            returning c.id, c.attempt, d.state as was, d.claimed_by
        ), logged as (
            insert into {schema}.job_history (job_id, at, attempt, outcome, error)
            select cancelled.id, at, cancelled.attempt, 'cancelled', 'cancelled with its parent job ' || new.id
            from cancelled
        )
        select count(*) into told from (
            select pg_notify('{channel}_cancel',
                             json_build_object('holder', claimed_by, 'ids', json_build_array(id))::text)
            from cancelled where was = 'running' and octet_length(claimed_by) <= 1000
            union all
            -- and the waiters on their results (job_settled's channel)
            select pg_notify('{channel}_settled', cancelled.id::text) from cancelled
        ) as told;
    end if;
    return null;
end
$fn$;

drop trigger if exists jobs_fanin_settle on {schema}.jobs;
create trigger jobs_fanin_settle after update of state on {schema}.jobs
    for each row
    when ((new.fanin_id is not null or new.state = 'cancelled')
          and (old.state in ('ready', 'running', 'suspended')) <> (new.state in ('ready', 'running', 'suspended')))
    execute function {schema}.fanin_settle();
