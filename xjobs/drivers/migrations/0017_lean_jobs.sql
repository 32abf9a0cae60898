-- Version 17: a lease renewal rewrites its row in place.
-- compatible-with-previous: yes (an index re-keyed; no statement names it, every plan keeps one)
--
-- The index of running jobs was keyed on lease_expires_at, the one column a renewal changes, so
-- every renewal of a running job was a non-HOT update: a new row version on whatever page had
-- room, plus a new entry in the primary key, this index and the idempotency index, about 400
-- bytes of WAL each (bench/wal.py). Keyed on claimed_by, which only a claim, a release or a
-- rescue changes (each also changes state, so none of them could be HOT anyway), a renewal
-- touches no indexed column: it is a HOT update on the row's own page, about 80 bytes, and the
-- indexes are left alone. What read the index still does: job_release_worker finds a worker's
-- jobs by claimed_by (now an index condition), job_rescue_lapsed and job_running read the
-- running rows, as many as the fleet runs at once, and sort them.
drop index if exists {schema}.jobs_running_idx;
create index if not exists jobs_running_idx on {schema}.jobs (claimed_by) where state = 'running';
