// Apache Curator's LeaderLatch and LeaderSelector as participants in zklock's cross-language
// leader tests (tests/interop_leader.rs compiles and runs this file).
//
// Usage:
//   CuratorLeader latch <connectString> <path> <id>
//   CuratorLeader selector <connectString> <path> <id>      (autoRequeue)
//
// Commands on stdin, one a line:
//   participants   prints PARTICIPANTS <id>:<L|F> ... (getParticipants(), in Curator's order)
//   release        (selector) returns from takeLeadership()
//   close          closes the recipe (a latch with CloseMode.NOTIFY_LEADER) and the client,
//                  prints CLOSED and exits
//
// stdout, one line per event, flushed at once:
//   READY <id>       started
//   LEADER <id>      isLeader() / takeLeadership() entered
//   FOLLOWER <id>    notLeader() / takeLeadership() returned
//
// On end of file on stdin (the test died) the client is closed and the JVM exits with status 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Semaphore;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLeader {
    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String describe(Iterable<Participant> participants) {
        StringBuilder out = new StringBuilder("PARTICIPANTS");
        for (Participant p : participants) {
            out.append(' ').append(p.getId()).append(':').append(p.isLeader() ? 'L' : 'F');
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4 || !(args[0].equals("latch") || args[0].equals("selector"))) {
            System.err.println("usage: CuratorLeader latch|selector <connect> <path> <id>");
            System.exit(2);
        }
        String kind = args[0], connect = args[1], path = args[2], id = args[3];
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(20_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        client.blockUntilConnected();

        Semaphore release = new Semaphore(0);
        LeaderLatch latch = null;
        LeaderSelector selector = null;
        if (kind.equals("latch")) {
            latch = new LeaderLatch(client, path, id, LeaderLatch.CloseMode.NOTIFY_LEADER);
            latch.addListener(new LeaderLatchListener() {
                @Override
                public void isLeader() {
                    say("LEADER " + id);
                }

                @Override
                public void notLeader() {
                    say("FOLLOWER " + id);
                }
            });
            latch.start();
        } else {
            selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework c) throws Exception {
                    say("LEADER " + id);
                    try {
                        release.acquire();
                    } finally {
                        say("FOLLOWER " + id);
                    }
                }
            });
            selector.setId(id);
            selector.autoRequeue();
            selector.start();
        }
        say("READY " + id);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            switch (line.trim()) {
                case "participants":
                    say(describe(latch != null ? latch.getParticipants() : selector.getParticipants()));
                    break;
                case "release":
                    release.release();
                    break;
                case "close":
                    if (latch != null) {
                        latch.close();
                    } else {
                        selector.close();
                    }
                    client.close();
                    say("CLOSED " + id);
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
