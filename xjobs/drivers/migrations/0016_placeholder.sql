-- placeholder
-- Version 16: reserved for a change made beside this one; it does nothing here.
-- compatible-with-previous: yes (no statement)
select 1;
