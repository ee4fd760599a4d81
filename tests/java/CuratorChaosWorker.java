// Apache Curator's InterProcessMutex or LeaderSelector as a worker of zklock's chaos suite
// (tests/chaos.rs compiles and runs this file). No package, so `java -cp <dir>:<jars> CuratorChaosWorker`.
//
// Usage:
//   CuratorChaosWorker <connectString> <lockPath> <registerHost:port> <name> <sessionMillis> [mutex|leader]
//
// `leader` mode: a LeaderSelector (id = name, autoRequeue) on <lockPath>; each takeLeadership() is
// one hold, with our election node's czxid as the token (the node holding our id at the head of the
// queue), and returns after it, so terms rotate. Like the mutex mode it checks nothing before a write.
//
// Loops until stdin says `stop` (or reaches end of file): acquire (1 s timeout) → fencing token
// (the czxid of our lock node, as zklock's) → `ENTER <token> <name>` to the fenced register →
// a few `WRITE <token> <name> <value>` → `EXIT <token> <name>` → release. Like most Curator users
// it does NOT check the connection state before a write. A write made after this process stood
// still for longer than its session timeout (a SIGSTOP, a GC pause) is a *late* write: counted,
// with how many the register rejected.
//
// stdout, one line per event, flushed at once, each starting with the marker `chaos: `:
//   chaos: ready <name> <sessionIdHex>
//   chaos: session <name> <sessionIdHex>     the session changed
//   chaos: lost <name>                        Curator's ConnectionState.LOST
//   chaos: stats <name> key=value ...         on stop
//   chaos: done <name>

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import java.util.List;

import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public class CuratorChaosWorker {
    /** Curator's InterProcessMutex, unchanged, with its protected getLockPath() made visible. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    static final int WRITES = 3;
    static final long STEP_MILLIS = 40;

    static volatile boolean stop;
    static final AtomicLong lost = new AtomicLong();

    /** One line to the register, one line back. */
    static final class Register {
        final Socket socket;
        final OutputStream out;
        final BufferedReader in;

        Register(String addr) throws Exception {
            int colon = addr.lastIndexOf(':');
            socket = new Socket(addr.substring(0, colon), Integer.parseInt(addr.substring(colon + 1)));
            socket.setTcpNoDelay(true);
            socket.setSoTimeout(30_000);
            out = socket.getOutputStream();
            in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
        }

        String request(String line) throws Exception {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            String answer = in.readLine();
            if (answer == null) {
                throw new IllegalStateException("the register closed the connection");
            }
            return answer;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5 && args.length != 6) {
            System.err.println("usage: CuratorChaosWorker <connectString> <lockPath> <registerHost:port> <name> <sessionMillis> [mutex|leader]");
            System.exit(64);
            return;
        }
        String connect = args[0], lockPath = args[1], registerAddr = args[2], name = args[3];
        int sessionMillis = Integer.parseInt(args[4]);
        long sessionNanos = TimeUnit.MILLISECONDS.toNanos(sessionMillis);

        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("stop")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // end of file
            }
            stop = true;
        }, "stdin-reader");
        reader.setDaemon(true);
        reader.start();

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMillis)
                .connectionTimeoutMs(Math.max(sessionMillis, 5_000))
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .build();
        client.getConnectionStateListenable().addListener((c, state) -> {
            if (state == ConnectionState.LOST) {
                lost.incrementAndGet();
                println("chaos: lost " + name);
            }
        });
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.err.println(name + ": not connected to " + connect + " within 60 s");
            System.exit(2);
            return;
        }
        long[] session = {client.getZookeeperClient().getZooKeeper().getSessionId()};
        println("chaos: ready " + name + " " + Long.toHexString(session[0]));
        Thread monitor = new Thread(() -> {
            while (!stop) {
                try {
                    long s = client.getZookeeperClient().getZooKeeper().getSessionId();
                    if (s != 0 && s != session[0]) {
                        session[0] = s;
                        println("chaos: session " + name + " " + Long.toHexString(s));
                    }
                    Thread.sleep(100);
                } catch (Exception e) {
                    // try again
                }
            }
        }, "session-monitor");
        monitor.setDaemon(true);
        monitor.start();

        Register register = new Register(registerAddr);
        if (args.length == 6 && args[5].equals("leader")) {
            lead(client, lockPath, register, name, sessionNanos);
            client.close();
            println("chaos: done " + name);
            System.exit(0);
            return;
        }
        Mutex mutex = new Mutex(client, lockPath);
        long acquisitions = 0, timeouts = 0, errors = 0, accepted = 0, rejected = 0;
        long lateAttempted = 0, lateRejected = 0;
        while (!stop) {
            boolean held;
            try {
                held = mutex.acquire(1, TimeUnit.SECONDS);
            } catch (Exception e) {
                errors++;
                Thread.sleep(50);
                continue;
            }
            if (!held) {
                timeouts++;
                continue;
            }
            try {
                acquisitions++;
                Stat stat = client.checkExists().forPath(mutex.node());
                if (stat == null) {
                    errors++; // our node is gone already: do not claim the lock
                    continue;
                }
                long token = stat.getCzxid();
                register.request("ENTER " + token + " " + name);
                long last = System.nanoTime();
                for (int k = 0; k < WRITES; k++) {
                    boolean late = System.nanoTime() - last > sessionNanos;
                    String answer = register.request("WRITE " + token + " " + name + " " + name + "#" + k);
                    boolean ok = answer.startsWith("OK ");
                    if (ok) {
                        accepted++;
                    } else {
                        rejected++;
                    }
                    if (late) {
                        lateAttempted++;
                        if (!ok) {
                            lateRejected++;
                        }
                    }
                    Thread.sleep(STEP_MILLIS);
                    last = System.nanoTime();
                }
                register.request("EXIT " + token + " " + name);
            } catch (Exception e) {
                errors++;
            } finally {
                try {
                    mutex.release();
                } catch (Exception e) {
                    errors++;
                }
            }
        }
        println("chaos: stats " + name + " acq=" + acquisitions + " accepted=" + accepted + " rejected=" + rejected
                + " skipped=0 late_attempted=" + lateAttempted + " late_stopped=0 late_rejected=" + lateRejected
                + " reads=0 timeouts=" + timeouts + " errors=" + errors + " lost=" + lost.get());
        client.close();
        println("chaos: done " + name);
        System.exit(0);
    }

    static volatile boolean leading;

    /** The leader mode: a LeaderSelector whose every term is one hold. */
    static void lead(CuratorFramework client, String path, Register register, String name, long sessionNanos)
            throws Exception {
        long[] c = new long[6]; // acquisitions, accepted, rejected, lateAttempted, lateRejected, errors
        LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework cf) throws Exception {
                if (stop) {
                    return;
                }
                leading = true;
                try {
                    term(cf, path, register, name, sessionNanos, c);
                } finally {
                    leading = false;
                }
            }
        });
        selector.setId(name);
        selector.autoRequeue();
        selector.start();
        while (!stop) {
            Thread.sleep(20);
        }
        // Let a running term finish (a close would interrupt it between its enter and exit).
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (leading && System.nanoTime() < until) {
            Thread.sleep(10);
        }
        selector.close();
        println("chaos: stats " + name + " acq=" + c[0] + " accepted=" + c[1] + " rejected=" + c[2]
                + " skipped=0 late_attempted=" + c[3] + " late_stopped=0 late_rejected=" + c[4]
                + " reads=0 timeouts=0 errors=" + c[5] + " lost=" + lost.get());
    }

    /** One term: find our node (the head of the queue, holding our id), then enter, write, exit. */
    static void term(CuratorFramework client, String path, Register register, String name, long sessionNanos,
            long[] c) throws Exception {
        long token;
        try {
            List<String> children = client.getChildren().forPath(path);
            children.sort((a, b) -> a.substring(a.lastIndexOf("lock-")).compareTo(b.substring(b.lastIndexOf("lock-"))));
            if (children.isEmpty()) {
                c[5]++;
                return;
            }
            Stat stat = new Stat();
            byte[] data = client.getData().storingStatIn(stat).forPath(path + "/" + children.get(0));
            if (!name.equals(new String(data, StandardCharsets.UTF_8))) {
                c[5]++; // the head is not ours (any more): do not claim leadership
                return;
            }
            token = stat.getCzxid();
        } catch (Exception e) {
            c[5]++;
            return;
        }
        c[0]++;
        register.request("ENTER " + token + " " + name);
        try {
            long last = System.nanoTime();
            for (int k = 0; k < WRITES; k++) {
                boolean late = System.nanoTime() - last > sessionNanos;
                String answer = register.request("WRITE " + token + " " + name + " " + name + "#" + k);
                boolean ok = answer.startsWith("OK ");
                if (ok) {
                    c[1]++;
                } else {
                    c[2]++;
                }
                if (late) {
                    c[3]++;
                    if (!ok) {
                        c[4]++;
                    }
                }
                Thread.sleep(STEP_MILLIS);
                last = System.nanoTime();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            boolean interrupted = Thread.interrupted();
            register.request("EXIT " + token + " " + name);
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    static void println(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
