"""kazoo's Lock as a worker of zklock's chaos suite (tests/chaos/ runs it with Debian's
python3-kazoo, beside zklock workers on InterProcessMutex::kazoo on the same path).

usage: kazoo_chaos_worker.py CONNECT PATH REGISTER NAME SESSION_MS

Loops until stdin says "stop" (or reaches end of file): acquire kazoo's Lock(PATH, NAME) (1 s
timeout) -> fencing token (the czxid of our lock node, as zklock's: node creation order, which
is queue order, so it rises with every holder in either language) -> "ENTER <token> <name>" to
the fenced register at REGISTER (host:port) -> three "WRITE <token> <name> <value>" 40 ms apart
-> "EXIT <token> <name>" -> release. Before each write it checks what kazoo's docs tell its
users to watch: the client's state (a write only while CONNECTED) and that no LOST came since
the acquisition. A process frozen past its session (SIGSTOP) still believes it is CONNECTED
when it wakes: such a write is a *late* write, counted with how many the register rejected.

stdout, one line per event, flushed at once, each starting with the marker "chaos: ":
  chaos: ready <name> <sessionIdHex>
  chaos: session <name> <sessionIdHex>     the session changed
  chaos: lost <name>                        kazoo's KazooState.LOST
  chaos: skip <name> <token> <reason>       a write not made (Suspended, Lost)
  chaos: stats <name> key=value ...         on stop
  chaos: done <name>
"""
import ctypes
import os
import signal
import socket
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoNodeError, SessionExpiredError
from kazoo.protocol.states import KazooState

WRITES = 3
STEP = 0.040
ATTEMPT = 1.0
# How long a stop waits for the hold loop (a release may be retrying through an outage).
STOP_GRACE = 30.0

_out = threading.Lock()


def say(line):
    with _out:
        sys.stdout.write("chaos: " + line + "\n")
        sys.stdout.flush()


def die_with_parent():
    """SIGKILL when the test that started us goes away, even while we are frozen."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        sys.exit("kazoo chaos worker: the test is gone")


class Register:
    """One line to the fenced register, one line back."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("r")

    def request(self, line):
        self.sock.sendall((line + "\n").encode())
        answer = self.reader.readline().strip()
        if not answer:
            raise IOError("the register closed the connection")
        return answer


class Stats:
    KEYS = ("acq", "accepted", "rejected", "skipped", "late_attempted", "late_stopped",
            "late_rejected", "reads", "timeouts", "errors", "lost")

    def __init__(self):
        for k in self.KEYS:
            setattr(self, k, 0)

    def line(self):
        return " ".join("%s=%d" % (k, getattr(self, k)) for k in self.KEYS)


class Worker:
    def __init__(self, connect, path, register, name, session):
        self.path, self.name, self.session = path, name, session
        self.stats = Stats()
        self.stop = threading.Event()
        self.state = KazooState.CONNECTED
        self.losses = 0
        self.zk = KazooClient(
            hosts=connect,
            timeout=session,
            connection_retry=dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1),
            command_retry=dict(max_tries=20, delay=0.1, backoff=2, max_delay=1),
        )
        self.zk.add_listener(self.on_state)
        self.zk.start(timeout=60)
        self.register = Register(register)

    def on_state(self, state):
        # kazoo's event thread: note it and return.
        self.state = state
        if state == KazooState.LOST:
            self.losses += 1
            self.stats.lost += 1
            say("lost %s" % self.name)

    def session_id(self):
        cid = self.zk.client_id
        return cid[0] if cid and cid[0] else None

    def watch_session(self):
        current = self.session_id()
        say("ready %s %x" % (self.name, (current or 0) & 0xFFFFFFFFFFFFFFFF))
        while not self.stop.is_set():
            s = self.session_id()
            if s is not None and s != current:
                current = s
                say("session %s %x" % (self.name, s & 0xFFFFFFFFFFFFFFFF))
            time.sleep(0.05)

    def loop(self):
        lock = self.zk.Lock(self.path, self.name)
        while not self.stop.is_set():
            try:
                got = lock.acquire(timeout=ATTEMPT)
            except LockTimeout:
                self.stats.timeouts += 1
                continue
            except Exception:  # connection loss, session expiry: kazoo cleaned up what it could
                self.stats.errors += 1
                lock = self.zk.Lock(self.path, self.name)
                time.sleep(0.05)
                continue
            if not got:
                self.stats.timeouts += 1
                continue
            # A LOST from here on ends the hold; one before it shows as a node of an old session.
            losses = self.losses
            node = self.path + "/" + lock.node
            try:
                self.hold(node, losses)
            except Exception:
                self.stats.errors += 1
            try:
                lock.release()
            except Exception:
                # kazoo still thinks it holds: a fresh Lock, and our node deleted by hand (a
                # node left in our live session would head the queue for good).
                self.stats.errors += 1
                lock = self.zk.Lock(self.path, self.name)
                self.delete(node)

    def delete(self, node):
        while not self.stop.is_set():
            try:
                self.zk.delete(node)
                return
            except (NoNodeError, SessionExpiredError):
                return
            except Exception:
                time.sleep(0.1)

    def hold(self, node, losses):
        """One hold: the token, enter, WRITES writes each after a state check, exit."""
        s = self.stats
        stat = self.zk.exists(node)
        if stat is None or stat.ephemeralOwner != self.session_id():
            s.errors += 1  # our node is gone already: do not claim the lock
            return
        token = stat.czxid
        s.acq += 1
        self.register.request("ENTER %d %s" % (token, self.name))
        last = time.monotonic()
        try:
            for k in range(WRITES):
                late = time.monotonic() - last > self.session
                reason = None
                if self.losses != losses:
                    reason = "Lost"
                elif self.state != KazooState.CONNECTED:
                    reason = "Suspended"
                if reason:
                    say("skip %s %d %s" % (self.name, token, reason))
                    s.skipped += 1
                    if late:
                        s.late_stopped += 1
                    break
                checked = time.monotonic()
                answer = self.register.request(
                    "WRITE %d %s %s#%d" % (token, self.name, self.name, k))
                late = late or time.monotonic() - checked > self.session
                ok = answer.startswith("OK ")
                if ok:
                    s.accepted += 1
                else:
                    s.rejected += 1
                if late:
                    s.late_attempted += 1
                    if not ok:
                        s.late_rejected += 1
                time.sleep(STEP)
                last = time.monotonic()
        finally:
            self.register.request("EXIT %d %s" % (token, self.name))


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: kazoo_chaos_worker.py CONNECT PATH REGISTER NAME SESSION_MS")
    connect, path, register, name = sys.argv[1:5]
    session = int(sys.argv[5]) / 1000.0
    die_with_parent()
    w = Worker(connect, path, register, name, session)
    monitor = threading.Thread(target=w.watch_session, daemon=True)
    monitor.start()
    holder = threading.Thread(target=w.loop, daemon=True)
    holder.start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    w.stop.set()
    holder.join(STOP_GRACE)
    stuck = holder.is_alive()
    if stuck:
        w.stats.errors += 1
    say("stats %s %s" % (name, w.stats.line()))
    try:
        w.zk.stop()
        w.zk.close()
    except Exception:
        pass
    say("done %s" % name)
    sys.stdout.flush()
    # A hold loop still stuck after the grace is a failure the suite reports.
    os._exit(3 if stuck else 0)


if __name__ == "__main__":
    main()
