"""redis-py's Lock under the Redis bench's loads. Prints one line of results.

usage:
  redis_py_bench.py URL cycle N              uncontended: N acquire+release, latencies in µs
  redis_py_bench.py URL contend SECONDS      acquire+release in a loop: the count
  redis_py_bench.py URL drain Q              Q threads wait on a held lock, then all take it
"""
import sys
import threading
import time

import redis

url, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3]
r = redis.Redis.from_url(url)
r.ping()
print("ready", flush=True)
sys.stdin.readline()  # go

if mode == "cycle":
    lat = []
    for _ in range(int(arg)):
        t = time.perf_counter()
        lock = r.lock("bench-py", timeout=30)
        lock.acquire()
        lock.release()
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    print("cycle", lat[len(lat) // 2], lat[int(len(lat) * 0.99)], time.process_time(), flush=True)
elif mode == "contend":
    import os
    me = str(os.getpid())
    end = time.monotonic() + float(arg)
    n = handoffs = 0
    while time.monotonic() < end:
        lock = r.lock("bench-py", timeout=30)
        lock.acquire()
        # Who held it last: a handoff if it was another session.
        if r.set("bench-py:last", me, get=True) not in (None, me.encode()):
            handoffs += 1
        lock.release()
        n += 1
    print("contend", n, time.process_time(), handoffs, flush=True)
elif mode == "drain":
    q = int(arg)
    holder = r.lock("bench-py-drain", timeout=30)
    holder.acquire()
    done = []

    def wait():
        lock = r.lock("bench-py-drain", timeout=30)
        lock.acquire()
        lock.release()
        done.append(1)

    threads = [threading.Thread(target=wait) for _ in range(q)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # every waiter is polling
    start = time.perf_counter()
    holder.release()
    for t in threads:
        t.join()
    print("drain", time.perf_counter() - start, len(done), time.process_time(), flush=True)
