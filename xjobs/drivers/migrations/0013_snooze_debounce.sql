-- Version 13: snooze and debounce.
-- compatible-with-previous: yes (a column with a default; older code never reads or writes it)

-- How many times the job put itself back for later (xjobs.Snooze) without spending an
-- attempt: the worker dead-letters it past its job's max_snoozes. Debounce needs no column:
-- a debounced enqueue moves the holder's run_at, bounded by its created_at.
alter table {schema}.jobs add column if not exists snoozes integer not null default 0;
