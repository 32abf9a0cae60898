-- placeholder
-- Version 14: reserved.
-- compatible-with-previous: yes (it changes nothing)

select 1;
