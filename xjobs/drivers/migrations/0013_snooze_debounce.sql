-- placeholder
-- compatible-with-previous: yes
-- Stands in for the migration of this number until it is merged.
select 1;
