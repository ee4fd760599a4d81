//! Real ZooKeeper servers for tests, examples and benchmarks (feature `testing`).
//!
//! [`TestingServer`] runs one standalone ZooKeeper JVM, [`TestingCluster`] an
//! ensemble of 1, 3 or 5 with a quorum, all on loopback (`127.0.0.1`) with free
//! ports and temporary data directories. They are never mocks: the lock
//! recipes are tested against the real server, including crashes
//! ([`kill`](TestingServer::kill)), restarts on the same port and data
//! ([`restart`](TestingServer::restart)), frozen servers
//! ([`pause`](TestingServer::pause) / [`resume`](TestingServer::resume), i.e.
//! SIGSTOP / SIGCONT, which make sessions time out) and leader failover.
//!
//! # Faults and fencing
//!
//! * [`FaultProxy`]: a userspace TCP proxy in front of one server (or one per member of a
//!   cluster) that delays frames, goes silent ([`blackhole`](FaultProxy::blackhole)), loses
//!   the replies to chosen requests ([`drop_replies_to`](FaultProxy::drop_replies_to)), resets
//!   connections, and cuts off one session while others keep the server
//!   ([`cut_off`](FaultProxy::cut_off)). No root, no `tc`.
//! * [`FencedRegister`]: a loopback service standing for the resource a lock protects. It
//!   refuses writes with a stale fencing token and logs enters, exits and writes in one serial
//!   order; [`FenceReport::check`] finds overlapping holders and accepted stale writes in such
//!   a log. Workers in other processes reach it with [`FenceClient`].
//! * [`SilentListener`]: a host that accepts connections and never answers (a powered-off or
//!   partitioned host, a frozen process), to put in a URL's host list in place of one member.
//! * `TestingPgBouncer` (feature `postgres`): a throwaway PgBouncer in any pool mode in front of
//!   a `TestingPostgres`, for what works through a connection pooler and what does not.
//!
//! # Requirements
//!
//! Java and ZooKeeper must be installed; on Debian:
//! `apt-get install zookeeper default-jre-headless`. The server is run as
//! `java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`
//! (the jar's manifest lists its dependencies). Set `ZOOKEEPER_CLASSPATH` to
//! use another ZooKeeper, and `JAVA` (or `JAVA_HOME`) to use another Java.
//! Without them, starting a server fails with [`std::io::ErrorKind::NotFound`]
//! and a message saying what to install.
//!
//! # Configuration
//!
//! The tick time is [`TICK_TIME`] (200 ms, a tenth of ZooKeeper's default) so
//! that session expiry and leader elections take fractions of a second:
//! sessions may last from [`MIN_SESSION_TIMEOUT`] (2 ticks, 400 ms) to
//! [`MAX_SESSION_TIMEOUT`] (60 s); `initLimit=20` and `syncLimit=10` ticks.
//! Every four-letter word is allowed (`srvr`, `wchc`, `cons`, `mntr`, ...), the
//! admin HTTP server is off, client connections are unlimited, container and
//! TTL nodes are reaped every 500 ms, and the transaction log is not fsynced
//! (`forceSync=no`: a killed JVM loses nothing, only a power cut would).
//!
//! A server's stdout and stderr go to `zookeeper.log` in its temporary
//! directory; when a server does not come up within 60 s the error quotes the
//! last lines of that log.
//!
//! # Cleanup
//!
//! No JVM outlives its test: dropping a [`TestingServer`] or
//! [`TestingCluster`] kills its JVMs (also when the test panics), and every JVM
//! is started with `PR_SET_PDEATHSIG = SIGKILL` from a thread that lives as
//! long as the process, so the kernel kills them if the test process dies.
//!
//! # Example
//!
//! ```no_run
//! use zklock::testing::TestingServer;
//!
//! let server = TestingServer::start()?;
//! println!("ZooKeeper at {}", server.connect_string());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::time::Duration;

#[cfg(any(feature = "redis", feature = "mysql"))]
mod clock;
mod cluster;
mod config;
mod fence;
mod four_letter;
mod instance;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
mod lifecycle;
#[cfg(feature = "mysql")]
mod mariadb;
#[cfg(feature = "postgres")]
mod pgbouncer;
#[cfg(feature = "postgres")]
mod postgres;
mod process;
mod proxy;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
mod sentinel;
mod server;
mod session;
mod silent;
mod tls;

#[cfg(any(feature = "redis", feature = "mysql"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "redis", feature = "mysql"))))]
pub use clock::ClockOffset;
pub use cluster::TestingCluster;
pub use fence::{
    FenceClient, FenceEvent, FenceEventKind, FenceReport, FencedRegister, Overlap, WorkerStats,
    WriteOutcome,
};
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use mariadb::TestingMariaDb;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use pgbouncer::TestingPgBouncer;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::TestingPostgres;
pub use proxy::{FaultProxy, ProxyStats};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::TestingRedis;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis_cluster::TestingRedisCluster;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use sentinel::TestingSentinel;
pub use server::TestingServer;
pub use session::expire_session;
pub use silent::SilentListener;
pub use tls::TestingTls;

/// Where examples and benchmarks connect: `ZK_CONNECT` if it is set, else a throwaway
/// [`TestingServer`] started here (keep it alive as long as you need the server).
///
/// # Example
/// ```no_run
/// let (connect, _server) = zklock::testing::connect_string_or_start()?;
/// let client = zklock::Client::connect(&connect).expect("connect");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn connect_string_or_start() -> std::io::Result<(String, Option<TestingServer>)> {
    match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.trim().is_empty() => Ok((connect, None)),
        _ => {
            let server = TestingServer::start()?;
            Ok((server.connect_string(), Some(server)))
        }
    }
}

/// The servers' `tickTime`: 200 ms.
///
/// ZooKeeper measures session timeouts and its sync limits in ticks.
pub const TICK_TIME: Duration = Duration::from_millis(200);

/// The shortest session timeout the servers grant (`minSessionTimeout`, 2 ticks).
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);

/// The longest session timeout the servers grant (`maxSessionTimeout`).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::io;
    use std::process::Command;
    use std::time::{Duration, Instant};

    use super::{TestingCluster, TestingServer};

    /// Pids of live `QuorumPeerMain` processes among `pids`.
    fn live_zookeepers(pids: &HashSet<u32>) -> Vec<String> {
        let out = Command::new("ps")
            .args(["-eo", "pid,args"])
            .output()
            .expect("ps runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|line| line.contains("QuorumPeerMain"))
            .filter(|line| {
                let pid = line
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<u32>().ok());
                pid.is_some_and(|p| pids.contains(&p))
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn server_starts_and_answers_srvr() {
        let started = Instant::now();
        let server = TestingServer::start().expect("server starts");
        eprintln!("TestingServer up in {:?}", started.elapsed());
        let srvr = server.four_letter("srvr").unwrap();
        assert!(srvr.contains("Mode: standalone"), "{srvr}");
        assert_eq!(server.four_letter("ruok").unwrap(), "imok");
        assert_eq!(
            server.connect_string(),
            format!("127.0.0.1:{}", server.port())
        );
        assert!(server.pid().is_some());
        assert!(server.four_letter("conf").unwrap().contains("tickTime=200"));
    }

    #[test]
    fn stop_and_restart_keep_port_and_data() {
        let mut server = TestingServer::start().expect("server starts");
        let port = server.port();
        let data = server.data_dir();
        let first_pid = server.pid().unwrap();

        server.stop().unwrap();
        assert_eq!(server.pid(), None);
        assert!(server.four_letter("srvr").is_err());
        assert!(data.join("version-2").is_dir(), "data dir survives stop");

        server.restart().expect("restarts");
        assert_eq!(server.port(), port);
        assert_eq!(server.data_dir(), data);
        assert_ne!(server.pid(), Some(first_pid));
        assert!(server
            .four_letter("srvr")
            .unwrap()
            .contains("Mode: standalone"));

        // kill + restart, and restart of a running server.
        server.kill().unwrap();
        assert_eq!(server.pid(), None);
        server.restart().expect("restarts after kill");
        server.restart().expect("restarts while running");
        assert_eq!(server.port(), port);
        assert!(server
            .four_letter("srvr")
            .unwrap()
            .contains("Mode: standalone"));
    }

    #[test]
    fn pause_times_out_and_resume_answers() {
        let server = TestingServer::start().expect("server starts");
        server.pause().unwrap();
        let started = Instant::now();
        let err = server
            .four_letter("srvr")
            .expect_err("a paused server does not answer");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        server.resume().unwrap();
        assert!(server
            .four_letter("srvr")
            .unwrap()
            .contains("Mode: standalone"));
    }

    #[test]
    fn dropped_servers_leave_no_jvm() {
        let mut pids = HashSet::new();
        {
            let server = TestingServer::start().expect("server starts");
            pids.insert(server.pid().unwrap());
            server.pause().unwrap(); // a paused JVM must die too
            assert_eq!(live_zookeepers(&pids).len(), 1);
        }
        assert_eq!(live_zookeepers(&pids), Vec::<String>::new());
    }

    #[test]
    fn cluster_size_must_be_odd_and_small() {
        for n in [0, 2, 4, 6] {
            let err = TestingCluster::start(n).expect_err("invalid size");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn cluster_elects_a_new_leader_when_the_leader_dies() {
        let started = Instant::now();
        let mut cluster = TestingCluster::start(3).expect("cluster starts");
        eprintln!("3-node TestingCluster up in {:?}", started.elapsed());
        assert_eq!(cluster.len(), 3);
        assert_eq!(cluster.connect_string().split(',').count(), 3);
        let mut pids: HashSet<u32> = (0..3).map(|i| cluster.pid(i).unwrap()).collect();
        assert_eq!(live_zookeepers(&pids).len(), 3);

        let leader = cluster.leader().expect("a leader");
        let modes: Vec<String> = (0..3)
            .map(|i| cluster.four_letter(i, "srvr").unwrap())
            .collect();
        assert_eq!(
            modes.iter().filter(|m| m.contains("Mode: leader")).count(),
            1,
            "{modes:?}"
        );
        assert_eq!(
            modes
                .iter()
                .filter(|m| m.contains("Mode: follower"))
                .count(),
            2,
            "{modes:?}"
        );

        cluster.kill(leader).unwrap();
        assert_eq!(cluster.pid(leader), None);
        let failover = Instant::now();
        let new_leader = cluster
            .wait_for_leader(Duration::from_secs(30))
            .expect("a new leader");
        eprintln!("new leader after {:?}", failover.elapsed());
        assert_ne!(new_leader, leader);

        cluster.restart(leader).expect("old leader rejoins");
        pids.insert(cluster.pid(leader).unwrap());
        let srvr = cluster.four_letter(leader, "srvr").unwrap();
        assert!(srvr.contains("Mode: follower"), "{srvr}");

        drop(cluster);
        assert_eq!(live_zookeepers(&pids), Vec::<String>::new());
    }
}
