-- Version 10: the backfill ledger.
-- compatible-with-previous: yes (a new table)

-- One row per RUN of a backfill (its job id), never per name: a forced pass is a new job and
-- so a new row, history rather than an edit of it. What a pass has SWEPT, for operators, and
-- the record that a name is done (only 'completed' blocks a name); where a pass resumes is
-- its step checkpoints, never this row, which is not transactional with them.
create table if not exists {schema}.backfills (
    job_id       bigint      primary key,
    name         text        not null,
    state        text        not null check (state in ('running', 'completed', 'failed')),
    rows_swept   bigint      not null default 0 check (rows_swept >= 0),
    started_at   timestamptz not null,
    completed_at timestamptz,
    checksum     text        not null,
    environment  text,
    error        text
);

-- "has this name completed", and a name's runs in order
create index if not exists backfills_name on {schema}.backfills (name, started_at);
