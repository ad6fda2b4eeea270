BEGIN;
CREATE TABLE widgets (id serial PRIMARY KEY, name text);
SELECT pg_sleep(1);
COMMIT;
