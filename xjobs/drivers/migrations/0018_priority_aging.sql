-- Version 18: priority aging, job(aging="1m").
-- compatible-with-previous: yes (a nullable column; older code never reads or writes it)

-- The priority a row was enqueued at, kept the first time aging (job_age) improves its priority;
-- null: its priority is still the one it was enqueued with. Aging counts from it, so a row's
-- priority follows its age, and jobs show says where it started. No index: job_age finds its
-- rows through jobs_ready_idx, level by level (see the statement). An integer, as priority is:
-- a row the driver took with a priority past job()'s range must still age.
alter table {schema}.jobs add column if not exists base_priority integer;
