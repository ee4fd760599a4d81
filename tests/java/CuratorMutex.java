// Apache Curator's InterProcessMutex as a contender in zklock's cross-language tests
// (tests/interop.rs compiles and runs this file). No package, so `java -cp <dir>:<jars> CuratorMutex`.
//
// Usage:
//   CuratorMutex <connectString> <lockPath> <iterations> <holdMillis> <name> [<sharedLog>]
//       Acquires and releases the mutex <iterations> times, holding it <holdMillis> ms each time.
//   CuratorMutex --hold <connectString> <lockPath> <name> [<sharedLog>]
//       Acquires once, then obeys commands read from stdin, one a line:
//       `participants` prints the participant list again; `release` releases and exits.
//
// stdout, one line per event, flushed at once:
//   READY <name>                           connected, about to contend
//   ENTER <name> <nanoTime> <ourLockNode>  acquired (the node comes from Curator's protected
//                                          getLockPath(), exposed by a subclass)
//   PARTICIPANTS <node> <node> ...         getParticipantNodes() (only with --hold; the holder first)
//   EXIT <name> <nanoTime>                 about to release
//   DONE <name>                            released everything and closed the client
//
// With <sharedLog>, `ENTER <name>` and `EXIT <name>` are also appended to that file while the lock
// is held, one write in append mode (O_APPEND) per line, so that every contender, in any language,
// writes one ordered log: two ENTERs without the first's EXIT between them would be an overlap.
//
// When stdin reaches end of file before the work is done (and before a `release` command), the
// test that started us died or gave up: the client is closed, which deletes our node, and the JVM
// exits with status 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorMutex {
    /** Curator's InterProcessMutex, unchanged, with its protected getLockPath() made visible. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        /** The calling thread's lock node, or null. */
        String node() {
            return getLockPath();
        }
    }

    private static final String EOF = "\u0000EOF";
    private static final BlockingQueue<String> commands = new LinkedBlockingQueue<>();
    private static volatile CuratorFramework client;
    private static volatile boolean finished;

    public static void main(String[] args) throws Exception {
        boolean hold = args.length > 0 && args[0].equals("--hold");
        String connect, lockPath, name, sharedLog;
        int iterations;
        long holdMillis;
        if (hold && (args.length == 4 || args.length == 5)) {
            connect = args[1];
            lockPath = args[2];
            name = args[3];
            sharedLog = args.length == 5 ? args[4] : null;
            iterations = 1;
            holdMillis = 0;
        } else if (!hold && (args.length == 5 || args.length == 6)) {
            connect = args[0];
            lockPath = args[1];
            iterations = Integer.parseInt(args[2]);
            holdMillis = Long.parseLong(args[3]);
            name = args[4];
            sharedLog = args.length == 6 ? args[5] : null;
        } else {
            System.err.println("usage: CuratorMutex <connectString> <lockPath> <iterations> <holdMillis> <name> [<sharedLog>]");
            System.err.println("       CuratorMutex --hold <connectString> <lockPath> <name> [<sharedLog>]");
            System.exit(64);
            return;
        }
        Path log = sharedLog == null ? null : Paths.get(sharedLog);

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
        println("READY " + name);

        Mutex mutex = new Mutex(client, lockPath);
        for (int i = 0; i < iterations; i++) {
            mutex.acquire();
            try {
                append(log, "ENTER " + name);
                println("ENTER " + name + " " + System.nanoTime() + " " + mutex.node());
                if (hold) {
                    printParticipants(mutex);
                    for (;;) {
                        String command = commands.take();
                        if (command.equals(EOF)) {
                            // The stdin reader is closing the session and halting the JVM.
                            Thread.sleep(Long.MAX_VALUE);
                        } else if (command.equals("release")) {
                            break;
                        } else if (command.equals("participants")) {
                            printParticipants(mutex);
                        } else {
                            System.err.println(name + ": unknown command " + command);
                        }
                    }
                } else if (holdMillis > 0) {
                    Thread.sleep(holdMillis);
                }
                println("EXIT " + name + " " + System.nanoTime());
                append(log, "EXIT " + name);
            } finally {
                mutex.release();
            }
        }
        finished = true;
        client.close();
        println("DONE " + name);
        System.exit(0);
    }

    private static void printParticipants(InterProcessMutex mutex) throws Exception {
        println("PARTICIPANTS " + String.join(" ", mutex.getParticipantNodes()));
    }

    private static void println(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** One line, one write, in append mode. */
    private static void append(Path log, String line) throws Exception {
        if (log != null) {
            Files.write(log, (line + "\n").getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
        }
    }

    /** Queues stdin's lines as commands; on end of file closes the client and exits. */
    private static void startStdinReader() {
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    commands.add(line.trim());
                    if (line.trim().equals("release")) {
                        return; // the main thread finishes on its own: stdin may close now
                    }
                }
            } catch (Exception e) {
                // treated as end of file
            }
            if (finished) {
                return;
            }
            commands.add(EOF);
            // Whoever started us is gone: close the session (deleting our node), never hang.
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
