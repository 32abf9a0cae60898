-- Version 4: durable steps and stored events.
-- compatible-with-previous: yes (new tables only)
--
-- As the second release of version 4 installed it: its first release built events_lookup_idx
-- without sent_at (migration 9 rebuilds it on those databases).

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
