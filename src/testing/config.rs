//! Finding Java and ZooKeeper (Debian's jars or `ZOOKEEPER_CLASSPATH`), free ports and the
//! configuration a ZooKeeper JVM is started with.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::{MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, TICK_TIME};

/// Debian's ZooKeeper jar; its manifest's Class-Path names its dependencies.
pub(super) const DEBIAN_ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// slf4j bindings tried, in order, next to the Debian jar (first one found is used).
pub(super) const SLF4J_BINDINGS: &[&str] = &[
    "/usr/share/java/slf4j-simple.jar",
    "/usr/share/java/slf4j-nop.jar",
];
/// Netty jars that Debian's ZooKeeper manifest does not name but its Netty connection factory
/// needs (TLS servers).
pub(super) const DEBIAN_NETTY_EXTRA: &[&str] = &[
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];
pub(super) const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// The superuser a [`TestingCluster`](super::TestingCluster) reconfigures its ensemble as
/// (`digest` auth `user:password`), and the digest its members know it by.
pub(super) const SUPER_AUTH: &str = "zklock-super:zklock-super-secret";
pub(super) const SUPER_DIGEST_FLAG: &str =
    "-Dzookeeper.DigestAuthenticationProvider.superDigest=zklock-super:WsBIPo/eAVHRvr0Ba0qRmH9tYL0=";

/// JVM flags: quick start-up, small heap, IPv4 loopback, no admin server,
/// fast container-node reaping, every four-letter word allowed.
pub(super) const JVM_FLAGS: &[&str] = &[
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dznode.container.checkIntervalMs=500",
    "-Dznode.container.maxPerMinute=100000",
    "-Dzookeeper.4lw.commands.whitelist=*",
    "-Dzookeeper.snapshot.trust.empty=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

/// The Java launcher: `$JAVA`, else `$JAVA_HOME/bin/java`, else `java` on PATH;
/// checked once (by running `java -version`) and cached.
pub(super) fn java() -> io::Result<PathBuf> {
    static JAVA: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    JAVA.get_or_init(|| {
        let java = match std::env::var_os("JAVA").filter(|s| !s.is_empty()) {
            Some(java) => PathBuf::from(java),
            None => match std::env::var_os("JAVA_HOME").filter(|s| !s.is_empty()) {
                Some(home) if Path::new(&home).join("bin/java").is_file() => {
                    Path::new(&home).join("bin/java")
                }
                _ => PathBuf::from("java"),
            },
        };
        let status = Command::new(&java)
            .arg("-version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(status) if status.success() => Ok(java),
            Ok(status) => Err(format!("`{} -version` failed ({status})", java.display())),
            Err(e) => Err(format!("cannot run `{}`: {e}", java.display())),
        }
    })
    .clone()
    .map_err(|why| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "zklock::testing needs a Java runtime to run ZooKeeper: {why}; \
                 install one (`apt-get install default-jre-headless zookeeper`) \
                 or point JAVA (the `java` binary) or JAVA_HOME at it"
            ),
        )
    })
}

/// The classpath holding ZooKeeper: `$ZOOKEEPER_CLASSPATH`, else Debian's jar
/// (plus an slf4j binding so that the server's log is not discarded).
pub(super) fn classpath() -> io::Result<String> {
    if let Some(cp) = std::env::var_os("ZOOKEEPER_CLASSPATH").filter(|s| !s.is_empty()) {
        return cp.into_string().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "ZOOKEEPER_CLASSPATH is not valid UTF-8",
            )
        });
    }
    if !Path::new(DEBIAN_ZOOKEEPER_JAR).is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "zklock::testing runs real ZooKeeper servers, but {DEBIAN_ZOOKEEPER_JAR} \
                 does not exist: install Debian's ZooKeeper and a JRE \
                 (`apt-get install zookeeper default-jre-headless`), or set \
                 ZOOKEEPER_CLASSPATH to a Java classpath holding ZooKeeper's jars"
            ),
        ));
    }
    let mut cp = DEBIAN_ZOOKEEPER_JAR.to_owned();
    // The jar's manifest misses Netty jars that the Netty connection factory (TLS) loads.
    for jar in DEBIAN_NETTY_EXTRA {
        if Path::new(jar).is_file() {
            cp.push(':');
            cp.push_str(jar);
        }
    }
    if let Some(binding) = SLF4J_BINDINGS.iter().find(|jar| Path::new(jar).is_file()) {
        cp.push(':');
        cp.push_str(binding);
    }
    Ok(cp)
}

/// `n` distinct free loopback ports (all listeners are held until every port
/// is picked, then dropped).
pub(super) fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// A quorum member's view of the ensemble.
pub(super) struct Quorum<'a> {
    /// Every member of the configuration it starts with.
    pub(super) peers: &'a [Peer],
    /// This member's id (1-based).
    pub(super) myid: usize,
}

/// A member as the ensemble's configuration names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Peer {
    /// ZooKeeper server id (from 1).
    pub(super) id: usize,
    pub(super) client: u16,
    pub(super) peer: u16,
    pub(super) election: u16,
}

impl Peer {
    /// Its line in a dynamic configuration, also the argument of a `reconfig -add`:
    /// `server.<id>=127.0.0.1:<peer>:<election>:participant;127.0.0.1:<client>`.
    pub(super) fn config_line(&self) -> String {
        format!(
            "server.{}=127.0.0.1:{}:{}:participant;127.0.0.1:{}",
            self.id, self.peer, self.election, self.client
        )
    }
}

/// Writes `dir/zoo.cfg` (and `dir/data/myid` for a quorum member) and
/// creates `dir/data`.
pub(super) fn write_config(
    dir: &Path,
    client_port: u16,
    quorum: Option<Quorum<'_>>,
    force_sync: bool,
) -> io::Result<()> {
    let data = dir.join("data");
    fs::create_dir_all(&data)?;
    let data_str = data
        .to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "temp dir is not UTF-8"))?;
    let tick = TICK_TIME.as_millis();
    let mut cfg = String::new();
    // `write!` to a String cannot fail.
    let _ = write!(
        cfg,
        "# written by zklock::testing\n\
         tickTime={tick}\n\
         initLimit=20\n\
         syncLimit=10\n\
         dataDir={data_str}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         maxClientCnxns=0\n\
         minSessionTimeout={min}\n\
         maxSessionTimeout={max}\n\
         4lw.commands.whitelist=*\n\
         admin.enableServer=false\n\
         reconfigEnabled={reconfig}\n\
         forceSync={sync}\n\
         preAllocSize=1024\n\
         cnxTimeout=1000\n",
        min = MIN_SESSION_TIMEOUT.as_millis(),
        max = MAX_SESSION_TIMEOUT.as_millis(),
        sync = if force_sync { "yes" } else { "no" },
        reconfig = quorum.as_ref().is_some_and(|q| q.peers.len() > 1),
    );
    match quorum {
        None => cfg.push_str("standaloneEnabled=true\n"),
        Some(q) => {
            let standalone = q.peers.len() == 1;
            let _ = writeln!(cfg, "standaloneEnabled={standalone}");
            for peer in q.peers {
                let _ = writeln!(cfg, "{}", peer.config_line());
            }
            fs::write(data.join("myid"), format!("{}\n", q.myid))?;
        }
    }
    fs::write(dir.join("zoo.cfg"), cfg)
}
