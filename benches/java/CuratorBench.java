// Curator 5's InterProcessMutex under the same loads as benches/mutex (run by the bench with
// --with-curator). Both modes print "ready" once set up, wait for a line on stdin, run, and print
// one line.
//
// contended <connect> <threads> <millis> <path>: N threads, each with its own CuratorFramework
// and mutex on one path, loop acquire -> counter += 1 -> release for a fixed time.
//   curator handoffs <n> elapsed_ms <ms> cpu_ms <process CPU of the JVM>
//
// drain <connect> <queue> <clients> <hold_ms> <path>: a holder takes the lock, <queue> waiter
// threads (each its own mutex, sharing <clients> CuratorFrameworks round-robin) queue behind it;
// once all their nodes are there it prints ready, and on "go" the holder releases.
//   curator drain_us <release to the last waiter done> head_us <first 10 %> tail_us <last 10 %> cpu_ms <ms>
//
// Scale modes (benches/scale.rs): each prints "ready" once warmed up, waits for "go", sets up <n>
// items, prints "done elapsed_us <us>", waits for "close", closes them all and prints
// "closed close_us <us>".
// locks <connect> <n> <path>: one CuratorFramework, one thread, InterProcessMutex on <path>/<i>
//   (fresh paths), every lock held until close.
// latches <connect> <n> <path>: one CuratorFramework, a LeaderLatch on <path>/<i>, each alone on
//   its path; done once every latch leads.
// clients <connect> <n>: <n> CuratorFrameworks, each connected.
// selectors <connect> <n> <path>: one CuratorFramework, a LeaderSelector (no auto-requeue) on
//   <path>/<i % 10>; done once each has led once (its takeLeadership returns at once).
import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String connect = args[1];
        if (mode.equals("contended")) {
            int threads = Integer.parseInt(args[2]);
            long millis = Long.parseLong(args[3]);
            String path = args[4];
            CuratorFramework[] clients = connect(connect, threads);
            // Warm-up, so the JIT is not measured: a short contended run on another path.
            run(clients, path + "-warmup", 1000);
            awaitGo();
            long cpu0 = OS.getProcessCpuTime();
            long t0 = System.nanoTime();
            long result = run(clients, path, millis);
            long elapsed = (System.nanoTime() - t0) / 1_000_000;
            long cpu = (OS.getProcessCpuTime() - cpu0) / 1_000_000;
            System.out.println("curator handoffs " + result + " elapsed_ms " + elapsed + " cpu_ms " + cpu);
            close(clients);
        } else if (mode.equals("drain")) {
            int queue = Integer.parseInt(args[2]);
            CuratorFramework[] clients = connect(connect, Integer.parseInt(args[3]) + 1);
            long hold = Long.parseLong(args[4]);
            String path = args[5];
            // Warm-up: a short drain on another path.
            Drain warm = new Drain(clients, path + "-warmup", 20, hold);
            warm.release();
            warm.await();
            Drain drain = new Drain(clients, path, queue, hold);
            awaitGo();
            long cpu0 = OS.getProcessCpuTime();
            long t0 = System.nanoTime();
            drain.release();
            long[] done = drain.await();
            long cpu = (OS.getProcessCpuTime() - cpu0) / 1_000_000;
            Arrays.sort(done);
            int k = Math.max(queue / 10, 1);
            long total = done[queue - 1] - t0;
            long head = done[k - 1] - t0;
            long tail = done[queue - 1] - (queue > k ? done[queue - 1 - k] : t0);
            System.out.println("curator drain_us " + total / 1000 + " head_us " + head / 1000
                + " tail_us " + tail / 1000 + " cpu_ms " + cpu);
            close(clients);
        } else if (mode.equals("locks") || mode.equals("latches") || mode.equals("clients")
                   || mode.equals("selectors")) {
            scale(mode, connect, Integer.parseInt(args[2]), args.length > 3 ? args[3] : "");
        } else {
            throw new IllegalArgumentException(
                "mode: contended, drain, locks, latches, selectors or clients");
        }
    }

    static void scale(String mode, String connect, int n, String path) throws Exception {
        java.io.BufferedReader in =
            new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        CuratorFramework client = connect(connect, 1)[0];
        // Warm-up, so the JIT is not measured: the same work on 200 items (20 Clients), closed.
        scaleClose(scaleOpen(mode, connect, client, mode.equals("clients") ? 20 : 200,
            path + "-warmup"));
        System.out.println("ready");
        System.out.flush();
        in.readLine(); // "go"
        long t0 = System.nanoTime();
        Object[] items = scaleOpen(mode, connect, client, n, path);
        System.out.println("done elapsed_us " + (System.nanoTime() - t0) / 1000);
        System.out.flush();
        in.readLine(); // "close"
        long t1 = System.nanoTime();
        scaleClose(items);
        client.close();
        System.out.println("closed close_us " + (System.nanoTime() - t1) / 1000);
        System.out.flush();
    }

    static Object[] scaleOpen(String mode, String connect, CuratorFramework client, int n,
                              String path) throws Exception {
        Object[] items = new Object[n];
        final CountDownLatch led = new CountDownLatch(mode.equals("selectors") ? n : 0);
        for (int i = 0; i < n; i++) {
            if (mode.equals("selectors")) {
                LeaderSelector selector = new LeaderSelector(client, path + "/" + (i % 10),
                    new LeaderSelectorListenerAdapter() {
                        @Override
                        public void takeLeadership(CuratorFramework c) {
                            led.countDown();
                        }
                    });
                selector.start();
                items[i] = selector;
            } else if (mode.equals("locks")) {
                InterProcessMutex mutex = new InterProcessMutex(client, path + "/" + i);
                mutex.acquire();
                items[i] = mutex;
            } else if (mode.equals("latches")) {
                LeaderLatch latch = new LeaderLatch(client, path + "/" + i);
                latch.start();
                items[i] = latch;
            } else {
                items[i] = connect(connect, 1)[0];
            }
        }
        if (!led.await(600, java.util.concurrent.TimeUnit.SECONDS)) {
            throw new IllegalStateException("not every selector led in 600 s");
        }
        if (mode.equals("latches")) {
            for (Object latch : items) {
                if (!((LeaderLatch) latch).await(60, java.util.concurrent.TimeUnit.SECONDS)) {
                    throw new IllegalStateException("a latch did not lead in 60 s");
                }
            }
        }
        return items;
    }

    static void scaleClose(Object[] items) throws Exception {
        for (Object item : items) {
            if (item instanceof InterProcessMutex) {
                ((InterProcessMutex) item).release();
            } else if (item instanceof LeaderLatch) {
                ((LeaderLatch) item).close();
            } else if (item instanceof LeaderSelector) {
                ((LeaderSelector) item).close();
            } else {
                ((CuratorFramework) item).close();
            }
        }
    }

    static CuratorFramework[] connect(String connect, int n) throws Exception {
        CuratorFramework[] clients = new CuratorFramework[n];
        for (int i = 0; i < n; i++) {
            clients[i] = CuratorFrameworkFactory.newClient(connect, 30000, 15000,
                new ExponentialBackoffRetry(100, 3));
            clients[i].start();
            clients[i].blockUntilConnected();
        }
        return clients;
    }

    static void close(CuratorFramework[] clients) {
        for (CuratorFramework c : clients) {
            c.close();
        }
    }

    static void awaitGo() throws Exception {
        System.out.println("ready");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine(); // "go"
    }

    // clients[0] holds; the waiters share the others.
    static class Drain {
        final InterProcessMutex holder;
        final long[] done;
        final CountDownLatch finished;

        Drain(CuratorFramework[] clients, String path, int queue, long hold) throws Exception {
            holder = new InterProcessMutex(clients[0], path);
            holder.acquire();
            done = new long[queue];
            finished = new CountDownLatch(queue);
            for (int i = 0; i < queue; i++) {
                final int me = i;
                final CuratorFramework client = clients[1 + i % (clients.length - 1)];
                Thread t = new Thread(null, () -> {
                    try {
                        InterProcessMutex mutex = new InterProcessMutex(client, path);
                        mutex.acquire();
                        if (hold > 0) {
                            Thread.sleep(hold);
                        }
                        mutex.release();
                        done[me] = System.nanoTime();
                    } catch (Exception e) {
                        e.printStackTrace();
                    } finally {
                        finished.countDown();
                    }
                }, "waiter-" + i, 256 * 1024);
                t.start();
            }
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (clients[0].getChildren().forPath(path).size() < queue + 1) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("the waiters did not queue in 60 s");
                }
                Thread.sleep(10);
            }
        }

        void release() throws Exception {
            holder.release();
        }

        long[] await() throws Exception {
            if (!finished.await(60, java.util.concurrent.TimeUnit.SECONDS)) {
                throw new IllegalStateException("the drain stalled for 60 s");
            }
            return done;
        }
    }

    static long run(CuratorFramework[] clients, String path, long millis) throws Exception {
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicLong total = new AtomicLong();
        CountDownLatch done = new CountDownLatch(clients.length);
        for (CuratorFramework client : clients) {
            Thread t = new Thread(() -> {
                InterProcessMutex mutex = new InterProcessMutex(client, path);
                try {
                    while (!stop.get()) {
                        mutex.acquire();
                        total.incrementAndGet();
                        mutex.release();
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                } finally {
                    done.countDown();
                }
            });
            t.start();
        }
        Thread.sleep(millis);
        stop.set(true);
        done.await();
        return total.get();
    }
}
