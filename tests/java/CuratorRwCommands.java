// Apache Curator's InterProcessReadWriteLock driven line by line from stdin, for zklock's
// cross-language downgrade test (tests/interop_rw_semaphore.rs compiles and runs this file).
//
// Usage: CuratorRwCommands <connectString> <path> <name>
//
// Commands on stdin, one a line, run in order on one thread (an acquire blocks the next ones):
//   read | write                   acquire that half; prints RENTER <name> / WENTER <name>
//   release-read | release-write   release that half; prints REXIT <name> / WEXIT <name>
//   close                          closes the client, prints CLOSED <name> and exits
// Prints READY <name> once connected. On end of file on stdin (the test died) the client is
// closed and the JVM exits with status 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorRwCommands {
    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: CuratorRwCommands <connect> <path> <name>");
            System.exit(2);
        }
        String connect = args[0], path = args[1], name = args[2];
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(20_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        client.blockUntilConnected();
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        say("READY " + name);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            switch (line.trim()) {
                case "read":
                    rw.readLock().acquire();
                    say("RENTER " + name);
                    break;
                case "write":
                    rw.writeLock().acquire();
                    say("WENTER " + name);
                    break;
                case "release-read":
                    say("REXIT " + name);
                    rw.readLock().release();
                    break;
                case "release-write":
                    say("WEXIT " + name);
                    rw.writeLock().release();
                    break;
                case "close":
                    client.close();
                    say("CLOSED " + name);
                    System.exit(0);
                    break;
                default:
                    System.err.println("unknown command: " + line);
            }
        }
        client.close();
        System.exit(3);
    }
}
