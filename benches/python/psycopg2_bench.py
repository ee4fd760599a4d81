"""psycopg2 taking the PostgreSQL bench's advisory lock. Prints one line of results.

usage:
  psycopg2_bench.py URL cycle N               uncontended: N lock+unlock, latencies in µs
  psycopg2_bench.py URL contend SECONDS FILE  lock+unlock in a loop; FILE records the last holder
  psycopg2_bench.py URL hold NAME             takes the lock NAME, prints "held", then holds it
                                              until killed or its stdin closes

The lock is the one a PgMutex of the same name takes, pg_advisory_lock(hashtextextended(name, 0)),
on one connection in autocommit mode: what a Python service would write.
"""
import os
import resource
import sys
import time

import psycopg2

url, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3]
conn = psycopg2.connect(url, application_name="psycopg2-bench")
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT 1")
print("ready", flush=True)
sys.stdin.readline()  # go

LOCK = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if mode == "cycle":
    lat = []
    for _ in range(int(arg)):
        t = time.perf_counter()
        cur.execute(LOCK, ("bench-py",))
        cur.execute(UNLOCK, ("bench-py",))
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    print("cycle", lat[len(lat) // 2], lat[int(len(lat) * 0.99)], time.process_time(), rss_mib(), flush=True)
elif mode == "hold":
    cur.execute(LOCK, (arg,))
    print("held", flush=True)
    sys.stdin.readline()
elif mode == "contend":
    me = os.getpid().to_bytes(8, "little")
    last = os.open(sys.argv[4], os.O_RDWR | os.O_CREAT, 0o600)
    end = time.monotonic() + float(arg)
    n = handoffs = 0
    waits = []
    while time.monotonic() < end:
        t = time.perf_counter()
        cur.execute(LOCK, ("bench-pyc",))
        waits.append((time.perf_counter() - t) * 1e6)
        # Who held it last: a handoff if it was another session.
        if os.pread(last, 8, 0) != me:
            handoffs += 1
        os.pwrite(last, me, 0)
        cur.execute(UNLOCK, ("bench-pyc",))
        n += 1
    waits.sort()
    p50 = waits[len(waits) // 2] if waits else 0
    p99 = waits[int(len(waits) * 0.99)] if waits else 0
    print("contend", n, time.process_time(), handoffs, p50, p99, rss_mib(), flush=True)
conn.close()
