-- Version 6: the enqueuing code's trace context, stored with the job.
-- compatible-with-previous: yes (a nullable column)

-- The W3C traceparent of the code that enqueued (or staged) the job, restored around its run.
alter table {schema}.jobs add column if not exists traceparent text;
