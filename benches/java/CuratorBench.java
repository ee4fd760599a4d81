// Curator 5's InterProcessMutex under the same load as benches/mutex.rs section 2: N threads,
// each with its own CuratorFramework and mutex on one path, loop acquire -> counter += 1 ->
// release for a fixed time. Run by the bench with --with-curator; prints one line:
//   curator handoffs <n> elapsed_ms <ms> cpu_ms <process CPU of the JVM>
import java.lang.management.ManagementFactory;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int threads = Integer.parseInt(args[1]);
        long millis = Long.parseLong(args[2]);
        String path = args[3];
        CuratorFramework[] clients = new CuratorFramework[threads];
        for (int i = 0; i < threads; i++) {
            clients[i] = CuratorFrameworkFactory.newClient(connect, 30000, 15000,
                new ExponentialBackoffRetry(100, 3));
            clients[i].start();
            clients[i].blockUntilConnected();
        }
        // Warm-up, so the JIT is not measured: a short contended run on another path.
        run(clients, path + "-warmup", 1000);
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        System.out.println("ready");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine(); // "go"
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        long result = run(clients, path, millis);
        long elapsed = (System.nanoTime() - t0) / 1_000_000;
        long cpu = (os.getProcessCpuTime() - cpu0) / 1_000_000;
        System.out.println("curator handoffs " + result + " elapsed_ms " + elapsed + " cpu_ms " + cpu);
        for (CuratorFramework c : clients) {
            c.close();
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
