"""A kazoo user for the interop tests (Debian's python3-kazoo), in one of two modes.

usage:
  kazoo_worker.py loop CONNECT PATH ID KIND ROUNDS FENCE|LOG
      KIND lock or write: takes kazoo's Lock / WriteLock ROUNDS times; each hold sends ENTER,
      a WRITE and EXIT with its node's czxid to the fenced register at FENCE (host:port).
      It does not judge the register's answers: the test judges the register's log.
      KIND sem:MAX: takes a lease of kazoo's Semaphore(MAX) ROUNDS times; each hold appends
      ENTER ID / EXIT ID to the file LOG.
  kazoo_worker.py cmd CONNECT PATH ID
      reads one command a line and answers one line:
      lock | rlock | wlock   acquire that recipe on PATH -> "held"
      release                release what is held -> "released"
      contenders             -> "contenders <json list>" of the held lock (or of a Lock)
      sem MAX                acquire a lease of Semaphore(MAX) -> "held" or "error <why>"
      holders MAX            -> "holders <json list>" (the Semaphore's lease_holders())
      elect                  run an Election; "leader" once elected, then waits for "resign"
      quit
Says "ready" once connected.
"""
import json
import socket
import sys
import time

from kazoo.client import KazooClient


def fence_client(addr):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    reader = sock.makefile("r")

    def request(line):
        sock.sendall((line + "\n").encode())
        answer = reader.readline().strip()
        if not answer:
            sys.exit("kazoo worker: the register closed the connection")
        return answer

    return request


def loop(zk, path, ident, kind, rounds, target):
    if kind.startswith("sem:"):
        sem = zk.Semaphore(path, ident, max_leases=int(kind[4:]))
        for _ in range(rounds):
            if not sem.acquire(timeout=120):
                sys.exit("kazoo worker: no lease within 120 s")
            with open(target, "a") as f:
                f.write("ENTER %s\n" % ident)
            time.sleep(0.005)
            with open(target, "a") as f:
                f.write("EXIT %s\n" % ident)
            sem.release()
        return
    lock = zk.WriteLock(path, ident) if kind == "write" else zk.Lock(path, ident)
    fence = fence_client(target)
    for i in range(rounds):
        if not lock.acquire(timeout=120):
            sys.exit("kazoo worker: lock not acquired within 120 s")
        token = zk.exists(path + "/" + lock.node).czxid
        fence("ENTER %d %s" % (token, ident))
        fence("WRITE %d %s %s-%d" % (token, ident, ident, i))
        time.sleep(0.002)
        fence("EXIT %d %s" % (token, ident))
        lock.release()


def commands(zk, path, ident):
    held = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd = words[0]
        if cmd == "quit":
            break
        if cmd in ("lock", "rlock", "wlock"):
            make = {"lock": zk.Lock, "rlock": zk.ReadLock, "wlock": zk.WriteLock}[cmd]
            held = make(path, ident)
            held.acquire()
            answer = "held"
        elif cmd == "release":
            held.release()
            answer = "released"
        elif cmd == "contenders":
            answer = "contenders " + json.dumps((held or zk.Lock(path, ident)).contenders())
        elif cmd == "sem":
            held = zk.Semaphore(path, ident, max_leases=int(words[1]))
            try:
                held.acquire()
                answer = "held"
            except ValueError as e:
                answer = "error %s" % e
        elif cmd == "holders":
            sem = zk.Semaphore(path, ident, max_leases=int(words[1]))
            answer = "holders " + json.dumps(sem.lease_holders())
        elif cmd == "elect":

            def lead():
                print("leader", flush=True)
                for order in sys.stdin:
                    if order.strip() == "resign":
                        return

            zk.Election(path, ident).run(lead)
            answer = "resigned"
        else:
            answer = "error unknown command %r" % cmd
        print(answer, flush=True)


def main():
    mode, connect, path, ident = sys.argv[1:5]
    zk = KazooClient(hosts=connect, timeout=20.0)
    zk.start(timeout=60)
    print("ready", flush=True)
    try:
        if mode == "loop":
            loop(zk, path, ident, sys.argv[5], int(sys.argv[6]), sys.argv[7])
        else:
            commands(zk, path, ident)
    finally:
        zk.stop()
        zk.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
