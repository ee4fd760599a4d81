// Apache Curator's InterProcessReadWriteLock and InterProcessSemaphoreV2 as contenders in zklock's
// cross-language tests (tests/interop_rw_semaphore.rs compiles and runs this file). No package, so
// `java -cp <dir>:<jars> CuratorRwSem ...`.
//
// Usage:
//   CuratorRwSem rw-loop <connect> <path> <iterations> <holdMillis> <name> <sharedLog> <writePercent>
//       InterProcessReadWriteLock(client, path): each iteration takes the write lock with
//       probability <writePercent> %, else the read lock, holds it <holdMillis> ms, releases it.
//   CuratorRwSem sem-loop <connect> <path> <maxLeases> <iterations> <holdMillis> <name> <sharedLog>
//       InterProcessSemaphoreV2(client, path, maxLeases): each iteration acquires one lease,
//       holds it <holdMillis> ms, returns it.
//
// Shared log (one write in append mode per line, written while held, so the file is the order of
// the holds of every contender in any language):
//   RENTER <name> / REXIT <name>   read lock
//   WENTER <name> / WEXIT <name>   write lock
//   SENTER <name> / SEXIT <name>   semaphore lease
//
// stdout, one line per event, flushed at once:
//   READY <name> <sessionId>                connected (decimal ZooKeeper session id), about to contend
//   RENTER|WENTER <name> <nanoTime> <node>  acquired; <node> is Curator's own getLockPath()
//   SENTER <name> <nanoTime> <nodeName>     acquired; the Lease's getNodeName() (no parent path)
//   REXIT|WEXIT|SEXIT <name> <nanoTime>     about to release
//   DONE <name>                             released everything and closed the client
//
// When stdin reaches end of file before the work is done, the test that started us died or gave
// up: the client is closed (deleting our nodes) and the JVM exits with status 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorRwSem {
    /** Curator's WriteLock, unchanged, with its protected getLockPath() made visible. */
    static final class Write extends InterProcessReadWriteLock.WriteLock {
        Write(CuratorFramework client, String path) {
            super(client, path, null);
        }

        String node() {
            return getLockPath();
        }
    }

    /** Curator's ReadLock, unchanged, with its protected getLockPath() made visible. */
    static final class Read extends InterProcessReadWriteLock.ReadLock {
        Read(CuratorFramework client, String path, InterProcessReadWriteLock.WriteLock write) {
            super(client, path, null, write);
        }

        String node() {
            return getLockPath();
        }
    }

    /**
     * Curator's InterProcessReadWriteLock built through its protected constructor from the two
     * halves above: the same as `new InterProcessReadWriteLock(client, path)`.
     */
    static final class ReadWrite extends InterProcessReadWriteLock {
        ReadWrite(Write write, Read read) {
            super(write, read);
        }
    }

    private static volatile CuratorFramework client;
    private static volatile boolean finished;
    /** Set by the stdin reader before it closes the client: the work fails from then on. */
    private static volatile boolean aborting;

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        if (mode.equals("rw-loop") && args.length == 8) {
            String connect = args[1], path = args[2];
            int iterations = Integer.parseInt(args[3]);
            long holdMillis = Long.parseLong(args[4]);
            String name = args[5];
            Path log = Paths.get(args[6]);
            int writePercent = Integer.parseInt(args[7]);
            start(connect, name);
            try {
                rwLoop(path, iterations, holdMillis, name, log, writePercent);
            } catch (Exception e) {
                abortedOr(e);
            }
            done(name);
        } else if (mode.equals("sem-loop") && args.length == 8) {
            String connect = args[1], path = args[2];
            int maxLeases = Integer.parseInt(args[3]);
            int iterations = Integer.parseInt(args[4]);
            long holdMillis = Long.parseLong(args[5]);
            String name = args[6];
            Path log = Paths.get(args[7]);
            start(connect, name);
            try {
                semLoop(path, maxLeases, iterations, holdMillis, name, log);
            } catch (Exception e) {
                abortedOr(e);
            }
            done(name);
        } else {
            System.err.println("usage: CuratorRwSem rw-loop <connect> <path> <iterations> <holdMillis> <name> <sharedLog> <writePercent>");
            System.err.println("       CuratorRwSem sem-loop <connect> <path> <maxLeases> <iterations> <holdMillis> <name> <sharedLog>");
            System.exit(64);
        }
    }

    private static void rwLoop(String path, int iterations, long holdMillis, String name, Path log,
            int writePercent) throws Exception {
        Write write = new Write(client, path);
        Read read = new Read(client, path, write);
        InterProcessReadWriteLock rw = new ReadWrite(write, read);
        Random random = new Random();
        for (int i = 0; i < iterations; i++) {
            boolean writing = random.nextInt(100) < writePercent;
            InterProcessMutex half = writing ? rw.writeLock() : rw.readLock();
            String tag = writing ? "W" : "R";
            half.acquire();
            try {
                append(log, tag + "ENTER " + name);
                String node = writing ? write.node() : read.node();
                println(tag + "ENTER " + name + " " + System.nanoTime() + " " + node);
                if (holdMillis > 0) {
                    Thread.sleep(holdMillis);
                }
                println(tag + "EXIT " + name + " " + System.nanoTime());
                append(log, tag + "EXIT " + name);
            } finally {
                half.release();
            }
        }
    }

    private static void semLoop(String path, int maxLeases, int iterations, long holdMillis,
            String name, Path log) throws Exception {
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, maxLeases);
        for (int i = 0; i < iterations; i++) {
            Lease lease = semaphore.acquire();
            try {
                append(log, "SENTER " + name);
                println("SENTER " + name + " " + System.nanoTime() + " " + lease.getNodeName());
                if (holdMillis > 0) {
                    Thread.sleep(holdMillis);
                }
                println("SEXIT " + name + " " + System.nanoTime());
                append(log, "SEXIT " + name);
            } finally {
                semaphore.returnLease(lease);
            }
        }
    }

    private static void start(String connect, String name) throws Exception {
        startStdinReader();
        client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(20_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.err.println(name + ": not connected to " + connect + " within 60 s");
            System.exit(2);
        }
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        println("READY " + name + " " + session);
    }

    /** Rethrows `e`, unless the stdin reader is closing the client and halting the JVM (status 3). */
    private static void abortedOr(Exception e) throws Exception {
        if (aborting) {
            Thread.sleep(Long.MAX_VALUE);
        }
        throw e;
    }

    private static void done(String name) {
        finished = true;
        client.close();
        println("DONE " + name);
        System.exit(0);
    }

    private static void println(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** One line, one write, in append mode. */
    private static void append(Path log, String line) throws Exception {
        Files.write(log, (line + "\n").getBytes(StandardCharsets.UTF_8),
                StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
    }

    /** Reads stdin to its end; at end of file before the work is done, closes the client and exits. */
    private static void startStdinReader() {
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                while (in.readLine() != null) {
                    // no commands: stdin only tells us that the test is still alive
                }
            } catch (Exception e) {
                // treated as end of file
            }
            if (finished) {
                return;
            }
            aborting = true;
            // Whoever started us is gone: close the session (deleting our nodes), never hang.
            Thread halt = new Thread(() -> {
                try {
                    Thread.sleep(5_000);
                } catch (InterruptedException e) {
                    // halt now
                }
                Runtime.getRuntime().halt(3);
            });
            halt.setDaemon(true);
            halt.start();
            try {
                CuratorFramework c = client;
                if (c != null) {
                    c.close();
                }
            } finally {
                Runtime.getRuntime().halt(3);
            }
        }, "stdin-reader");
        reader.setDaemon(true);
        reader.start();
    }
}
