"""A migration runner as applications write them with psycopg 3: take a session advisory
lock, apply the migration if the table of applied versions does not have it, release the
lock. Every statement goes through the extended protocol as a named prepared statement."""
import os
import sys
import time

import psycopg

KEY = 7242007
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    got = conn.execute("SELECT pg_try_advisory_lock(%s)", (KEY,), prepare=True).fetchone()[0]
    if not got:
        print("lock busy: another migrator runs")
        sys.exit(3)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS applied (version int PRIMARY KEY)", prepare=True)
        done = conn.execute("SELECT count(*) FROM applied WHERE version = %s", (1,), prepare=True).fetchone()[0]
        if done == 0:
            conn.execute("CREATE TABLE widgets (id serial PRIMARY KEY)", prepare=True)
            time.sleep(float(os.environ.get("PGCHAOS_MIGRATION_SLEEP", "1")))
            conn.execute("INSERT INTO applied VALUES (%s)", (1,), prepare=True)
            print("migrated")
        else:
            print("already migrated")
    finally:
        released = conn.execute("SELECT pg_advisory_unlock(%s)", (KEY,), prepare=True).fetchone()[0]
        print(f"released: {released}")
        if not released:
            sys.exit(4)
