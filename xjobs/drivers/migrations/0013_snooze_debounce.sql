-- placeholder
-- Version 13: reserved.
-- compatible-with-previous: yes (it changes nothing)

select 1;
