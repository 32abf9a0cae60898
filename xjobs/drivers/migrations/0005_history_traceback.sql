-- Version 5: a failed attempt's traceback in the job's history.
-- compatible-with-previous: yes (a nullable column)

-- A failed attempt's full traceback (bounded by the worker), beside its one-line error.
alter table {schema}.job_history add column if not exists traceback text;
