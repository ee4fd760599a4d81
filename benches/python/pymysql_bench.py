"""PyMySQL taking the MySQL bench's GET_LOCK. Prints one line of results.

usage:
  pymysql_bench.py URL cycle N               uncontended: N lock+unlock, latencies in µs
  pymysql_bench.py URL contend SECONDS FILE  lock+unlock in a loop; FILE records the last holder
  pymysql_bench.py URL hold NAME             takes the lock NAME, prints "held", then holds it
                                             until killed or its stdin closes

The lock is the one a MySqlMutex of the same name takes in the GET_LOCK mode,
SELECT GET_LOCK(name, 31536000) and SELECT RELEASE_LOCK(name), on one connection in autocommit
mode: what a Python service would write (Debian's python3-pymysql).
"""
import os
import resource
import sys
import time
from urllib.parse import parse_qs, urlparse

import pymysql

url, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3]
u = urlparse(url)
socket = parse_qs(u.query).get("socket", [None])[0]  # the Unix socket, if the URL names one
conn = pymysql.connect(
    unix_socket=socket,
    host=u.hostname,
    port=u.port or 3306,
    user=u.username,
    password=u.password or "",
    database=u.path.lstrip("/"),
    autocommit=True,
)
cur = conn.cursor()
cur.execute("SELECT 1")
print("ready", flush=True)
sys.stdin.readline()  # go

LOCK = "SELECT GET_LOCK(%s, 31536000)"
UNLOCK = "SELECT RELEASE_LOCK(%s)"


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if mode == "cycle":
    lat = []
    for _ in range(int(arg)):
        t = time.perf_counter()
        cur.execute(LOCK, ("bench-py",))
        cur.fetchall()
        cur.execute(UNLOCK, ("bench-py",))
        cur.fetchall()
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    print("cycle", lat[len(lat) // 2], lat[int(len(lat) * 0.99)], time.process_time(), rss_mib(), flush=True)
elif mode == "hold":
    cur.execute(LOCK, (arg,))
    cur.fetchall()
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
        cur.fetchall()
        waits.append((time.perf_counter() - t) * 1e6)
        # Who held it last: a handoff if it was another session.
        if os.pread(last, 8, 0) != me:
            handoffs += 1
        os.pwrite(last, me, 0)
        cur.execute(UNLOCK, ("bench-pyc",))
        cur.fetchall()
        n += 1
    waits.sort()
    p50 = waits[len(waits) // 2] if waits else 0
    p99 = waits[int(len(waits) * 0.99)] if waits else 0
    print("contend", n, time.process_time(), handoffs, p50, p99, rss_mib(), flush=True)
conn.close()
