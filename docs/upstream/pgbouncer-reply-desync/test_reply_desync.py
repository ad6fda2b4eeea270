import asyncio
import os
import re
import signal

import pytest
from psycopg.rows import dict_row

from .utils import LINUX, wait_until


def first_server_packet_after(log, mark):
    """The type of the first packet PgBouncer logged reading from a server
    after the log line containing mark, or None (needs verbose = 2)."""
    _, found, after = log.partition(mark)
    match = re.search(r"S-\S+ .* read pkt='(.)'", after) if found else None
    return match.group(1) if match else None


@pytest.mark.skipif(
    "not LINUX",
    reason="orders two socket events with SIGSTOP; relies on epoll reporting them in the order they became readable",
)
async def test_notification_during_reset_query(bouncer, pg):
    """
    A NotificationResponse that reaches a released server while its
    server_reset_query is in flight must not make PgBouncer hand that server
    to a waiting client before the reset query's ReadyForQuery. If it does,
    the waiting client receives the reply to DISCARD ALL as the reply to its
    own query, and every later reply answers the query before.

    PgBouncer is stopped while the LISTENing client leaves and a NOTIFY for its
    channel reaches its still-listening backend, so that on SIGCONT PgBouncer
    reads the client's close (and sends DISCARD ALL) before it reads the
    notification. The backend is stopped as well until PgBouncer has read the
    notification, so that no part of the reply to DISCARD ALL can arrive
    first.
    """
    # p3 is in session mode and has no pool_size of its own: one server, so
    # that the second client has to wait for the first one's.
    bouncer.admin("set default_pool_size = 1")
    bouncer.admin("set server_tls_sslmode = disable")
    bouncer.admin("set verbose = 2")

    listener = await bouncer.aconn(dbname="p3")
    await listener.execute("LISTEN test_reply_desync")
    cur = await listener.execute("SELECT pg_backend_pid()")
    listener_pid = (await cur.fetchone())[0]

    waiter = await bouncer.aconn(dbname="p3")
    waiter_query = asyncio.ensure_future(waiter.execute("SELECT 'waiter reply'"))
    for _ in wait_until("second client did not start waiting for the server"):
        await asyncio.sleep(0.1)  # let the query task send its query
        pools = bouncer.admin("SHOW POOLS", row_factory=dict_row)
        if any(p["database"] == "p3" and p["cl_waiting"] == 1 for p in pools):
            break

    with bouncer.log_contains(r"FIXME: query end, but query_start == 0", times=0):
        with bouncer.log_path.open() as log_file:
            log_file.seek(0, os.SEEK_END)
            backend_stopped = False
            bouncer.send_signal(signal.SIGSTOP)
            try:
                # The Terminate and the close reach PgBouncer's client socket
                # first ...
                await listener.close()
                # ... the notification reaches its server socket second: the
                # backend LISTENs until it runs DISCARD ALL.
                pg.sql("NOTIFY test_reply_desync", dbname="p0")
                await asyncio.sleep(0.5)
                os.kill(listener_pid, signal.SIGSTOP)
                backend_stopped = True
            finally:
                bouncer.send_signal(signal.SIGCONT)

            log = ""
            try:
                for _ in wait_until("PgBouncer did not read the notification"):
                    log += log_file.read()
                    if first_server_packet_after(log, "resetting: DISCARD ALL"):
                        break
            finally:
                if backend_stopped:
                    os.kill(listener_pid, signal.SIGCONT)

            # The test only means something if PgBouncer read the
            # notification after sending the reset query and before the reset
            # query's reply.
            assert first_server_packet_after(log, "resetting: DISCARD ALL") == "A"

            cur = await asyncio.wait_for(waiter_query, timeout=5)
            assert cur.statusmessage == "SELECT 1"
            assert await cur.fetchall() == [("waiter reply",)]
            cur = await waiter.execute("SELECT 'second reply'")
            assert await cur.fetchall() == [("second reply",)]
            await waiter.close()


@pytest.mark.skipif("not LINUX", reason="orders events with SIGSTOP, as above")
async def test_notification_during_check_query(bouncer, pg):
    """
    The same for server_check_query: a NotificationResponse read while the
    check query is in flight must not make PgBouncer hand the server to the
    waiting client before the check query's ReadyForQuery.

    In transaction pooling a client can LISTEN and leave its server listening.
    Its backend is stopped while PgBouncer sends it the check query for the
    next client, and a NOTIFY for its channel is sent; when it continues it
    sends the notification first and then runs the check query, which sleeps,
    so PgBouncer reads the notification alone.
    """
    # p3x is in transaction mode and has no pool_size of its own. A RELOAD,
    # not SET: a SET of server_check_query leaves the empty check query in use.
    bouncer.write_ini("default_pool_size = 1")
    bouncer.write_ini("server_tls_sslmode = disable")
    bouncer.write_ini("server_check_delay = 0")
    bouncer.write_ini("server_check_query = SELECT pg_sleep(0.5)")
    bouncer.write_ini("verbose = 2")
    bouncer.admin("reload")

    async with await bouncer.aconn(dbname="p3x") as listener:
        await listener.execute("LISTEN test_reply_desync")
        cur = await listener.execute("SELECT pg_backend_pid()")
        listener_pid = (await cur.fetchone())[0]

    waiter = await bouncer.aconn(dbname="p3x")
    with bouncer.log_contains(r"FIXME: query end, but query_start == 0", times=0):
        with bouncer.log_path.open() as log_file:
            log_file.seek(0, os.SEEK_END)
            log = ""
            os.kill(listener_pid, signal.SIGSTOP)
            try:
                waiter_query = asyncio.ensure_future(
                    waiter.execute("SELECT 'waiter reply'")
                )
                for _ in wait_until("PgBouncer did not send the check query"):
                    await asyncio.sleep(0.1)  # let the query task send its query
                    log += log_file.read()
                    if "P: checking: SELECT pg_sleep(0.5)" in log:
                        break
                pg.sql("NOTIFY test_reply_desync", dbname="p0")
            finally:
                os.kill(listener_pid, signal.SIGCONT)

            cur = await asyncio.wait_for(waiter_query, timeout=5)
            assert await cur.fetchall() == [("waiter reply",)]
            cur = await waiter.execute("SELECT 'second reply'")
            assert await cur.fetchall() == [("second reply",)]
            await waiter.close()
            log += log_file.read()

    assert first_server_packet_after(log, "P: checking: SELECT pg_sleep(0.5)") == "A"
