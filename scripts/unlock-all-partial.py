#!/usr/bin/env python3
# Usage: unlock-all-partial.py DSN KEYS ROUNDS   (needs psycopg 3; docs/checker.md shows a run)
# Does a pg_locks snapshot taken while pg_advisory_unlock_all() runs see some of the
# session's advisory locks released and others still held? (PostgreSQL's LockReleaseAll
# releases them one lock partition at a time.) Only snapshots begun after every lock was
# granted and ended before unlock_all returned are counted.
import sys, threading, psycopg
dsn = sys.argv[1]; N = int(sys.argv[2]); rounds = int(sys.argv[3])
a = psycopg.connect(dsn, autocommit=True); b = psycopg.connect(dsn, autocommit=True)
apid = a.execute("select pg_backend_pid()").fetchone()[0]
print("psycopg", psycopg.__version__, "|", a.execute("select version()").fetchone()[0])
seen = {}; stop = False; window = 0  # window: round number while unlock_all may run, else 0
def watch():
    while not stop:
        w = window
        n = b.execute("select count(*) from pg_locks where locktype='advisory' and pid=%s and granted", (apid,)).fetchone()[0]
        if w and window == w:
            seen[n] = seen.get(n, 0) + 1
t = threading.Thread(target=watch); t.start()
for r in range(1, rounds + 1):
    a.execute("select pg_advisory_lock(k) from generate_series(1,%s) k", (N,))
    window = r
    a.execute("select pg_advisory_unlock_all()")
    window = 0
stop = True; t.join()
partial = {n: c for n, c in seen.items() if 0 < n < N}
print("keys", N, "rounds", rounds, "snapshots inside unlock_all's window", sum(seen.values()),
      "| all held", seen.get(N, 0), "| none", seen.get(0, 0), "| some", sum(partial.values()), sorted(partial.items())[:8])
