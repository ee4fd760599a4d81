"""A redis-py Lock user for the interop test: takes the lock ROUNDS times and logs each hold.

usage: redis_py_lock.py URL NAME LOG ROUNDS
"""
import sys
import time

import redis

url, name, log, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = redis.Redis.from_url(url)
r.ping()
print("ready", flush=True)
for _ in range(rounds):
    lock = r.lock(name, timeout=30, sleep=0.005, blocking_timeout=120)
    if not lock.acquire():
        sys.exit("redis-py: lock not acquired within 120 s")
    with open(log, "a") as f:
        f.write("ENTER py\n")
    time.sleep(0.003)
    with open(log, "a") as f:
        f.write("EXIT py\n")
    lock.release()
    time.sleep(0.01)
print("done")
