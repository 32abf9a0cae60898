-- Version 11: a job's result.
-- compatible-with-previous: yes (a nullable column; older code never reads or writes it)

-- What the body returned, encoded once as JSON when its run completed: NULL for a body that
-- returned None, and for every job that did not complete. It lives in the job's own row, so
-- retention prunes it with the job and nothing else has to be swept.
alter table {schema}.jobs add column if not exists result jsonb;
