-- written by pgchaos for topology pgpool-caching
CREATE ROLE "chaos" LOGIN;
CREATE DATABASE "chaos" OWNER "chaos";
ALTER ROLE "chaos" SET lock_timeout = '1ms'; ALTER ROLE "chaos" SET statement_timeout = '10001ms'; ALTER ROLE "chaos" SET idle_in_transaction_session_timeout = '0'; ALTER ROLE "chaos" SET DateStyle = 'ISO, MDY'; ALTER ROLE "chaos" SET application_name = 'pgchaos'; SELECT set_config('pgchaos.client_role', 'chaos', false); DO $pgchaos$ DECLARE r text; BEGIN FOR n IN 1..64 LOOP r := 'pgchaos_r' || n; IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN EXECUTE format('CREATE ROLE %I NOLOGIN', r); EXECUTE format('GRANT pg_read_all_stats TO %I', r); IF current_setting('server_version_num')::int >= 160000 THEN EXECUTE format('GRANT %I TO %I WITH INHERIT FALSE', r, current_setting('pgchaos.client_role')); ELSE EXECUTE format('GRANT %I TO %I', r, current_setting('pgchaos.client_role')); END IF; END IF; END LOOP; END $pgchaos$;
\connect chaos
SET ROLE chaos;
CREATE TABLE IF NOT EXISTS pgchaos_schema_migrations (version int NOT NULL, replica text NOT NULL, backend_pid int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
RESET ROLE;
