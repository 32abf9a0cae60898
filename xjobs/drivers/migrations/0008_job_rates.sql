-- Version 8: per-minute outcome counts, reported by the workers.
-- compatible-with-previous: yes (a new table)
--
-- As the second release of version 8 installed it: its first release keyed the table
-- (queue, minute, outcome) (migration 9 re-keys those databases).

-- Per queue and minute, how many runs ended in each outcome, as the workers that ran them
-- report every few seconds (added up, so the fleet's figure): the dashboard's throughput and
-- failure rate without counting finished rows, which retention deletes anyway. A worker
-- killed between reports loses its last few seconds here; its jobs are not affected.
create table if not exists {schema}.job_rates (
    queue   text        not null,
    minute  timestamptz not null,
    outcome text        not null,
    n       bigint      not null,
    primary key (minute, queue, outcome)   -- minute first: the chart and the prune read by time
);
