SET ROLE chaos; CREATE TABLE IF NOT EXISTS pgchaos_schema_migrations (version int NOT NULL, replica text NOT NULL, backend_pid int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()); RESET ROLE
