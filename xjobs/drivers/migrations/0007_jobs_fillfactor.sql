-- Version 7: the jobs table keeps room on each page for a row's next version.
-- compatible-with-previous: yes (a storage parameter; no statement sees it)

-- A claim and a completion each write a new version of the row (state is in every partial
-- index, so neither can be HOT); on a full page it went to whatever page the free-space map
-- offered, and in a table holding millions of finished rows that was a different old page
-- each time: about one full-page image per job in the WAL (9,300 bytes a job instead of 900)
-- and half the drain rate. At 85 the versions stay on their page and new jobs fill fresh
-- pages (an insert leaves the reserve alone): 10,000,000 finished rows then cost the drain
-- about 5% (bench/README.md). Pages written before this version keep their old packing
-- until rewritten.
alter table {schema}.jobs set (fillfactor = 85);
