CREATE TABLE widgets (id bigserial PRIMARY KEY, name text);
SELECT pg_sleep(1);
