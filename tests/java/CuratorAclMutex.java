// Apache Curator's InterProcessMutex on a secured ensemble, for tests/security.rs: a client with
// `authorization("digest", <user:password>)` and an ACLProvider like zklock's recommended one
// (lock nodes creator-only, everything else creator-all + world-read). No package, so
// `java -cp <dir>:<jars> CuratorAclMutex`.
//
// Usage: CuratorAclMutex <connectString> <lockPath> <user:password> <name>
//   Acquires once, then waits for `release` on stdin, releases, closes the client and exits.
//
// stdout, one line per event, flushed at once:
//   READY <name>                  connected, about to contend
//   ENTER <name> <ourLockNode>    acquired
//   DONE <name>                   released and closed
//
// On end of file on stdin (the test died) the JVM exits at once with status 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;

public class CuratorAclMutex {
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    /** Lock nodes (`_c_…`) creator-only; the rest creator-all and world-read. */
    static final class CreatorOnlyLocks implements ACLProvider {
        private static final List<ACL> PARENTS = Arrays.asList(
                new ACL(ZooDefs.Perms.ALL, ZooDefs.Ids.AUTH_IDS),
                new ACL(ZooDefs.Perms.READ, ZooDefs.Ids.ANYONE_ID_UNSAFE));

        @Override
        public List<ACL> getDefaultAcl() {
            return PARENTS;
        }

        @Override
        public List<ACL> getAclForPath(String path) {
            String name = path.substring(path.lastIndexOf('/') + 1);
            return name.startsWith("_c_") ? ZooDefs.Ids.CREATOR_ALL_ACL : PARENTS;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: CuratorAclMutex <connectString> <lockPath> <user:password> <name>");
            System.exit(64);
        }
        String connect = args[0], lockPath = args[1], digest = args[2], name = args[3];
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(20_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .authorization("digest", digest.getBytes(StandardCharsets.UTF_8))
                .aclProvider(new CreatorOnlyLocks())
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.err.println(name + ": not connected to " + connect + " within 60 s");
            System.exit(2);
        }
        println("READY " + name);
        Mutex mutex = new Mutex(client, lockPath);
        mutex.acquire();
        println("ENTER " + name + " " + mutex.node());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("release")) {
            System.err.println(name + ": unknown command " + line);
        }
        if (line == null) {
            Runtime.getRuntime().halt(3);
        }
        mutex.release();
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
}
