"""One contender process of the Redis bench's cross-process hand-off (`benches/redis/handoff.rs`),
on a Python lock. Prints `ready`, then answers each command on its standard input:

  take      acquire, print `G <ns>`
  wait      print `W <ns>`, acquire (waiting), print `G <ns>`, release, print `D`
  release   print `R <ns>`, release, print `D`
  quit      exit

Times are the wall clock in nanoseconds (both processes run on one machine).

usage: redis_handoff.py URL redis-py|python-redis-lock NAME
"""
import sys
import time

import redis

url, kind, name = sys.argv[1], sys.argv[2], sys.argv[3]
r = redis.Redis.from_url(url)
r.ping()


def new_lock():
    if kind == "redis-py":
        # redis-py's Lock: a waiter polls every 100 ms (its default `sleep`).
        return r.lock(name, timeout=30)
    import redis_lock

    # python-redis-lock: a waiter blocks on a signal list (BLPOP) that a release pushes to.
    return redis_lock.Lock(r, name, expire=30)


print("ready", flush=True)
held = None
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "take":
        held = new_lock()
        held.acquire()
        print("G", time.time_ns(), flush=True)
    elif cmd == "wait":
        lock = new_lock()
        print("W", time.time_ns(), flush=True)
        lock.acquire()
        print("G", time.time_ns(), flush=True)
        lock.release()
        print("D", flush=True)
    elif cmd == "release":
        print("R", time.time_ns(), flush=True)
        held.release()
        held = None
        print("D", flush=True)
    elif cmd == "quit":
        break
