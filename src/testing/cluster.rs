//! [`TestingCluster`]: a ZooKeeper ensemble of real JVMs on loopback.

use std::io;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use super::config::{classpath, free_ports, java, write_config, Quorum};
use super::four_letter::mode;
use super::instance::{relaunch, wait_serving, Instance, START_ATTEMPTS, START_TIMEOUT};

/// An ensemble of 1, 3 or 5 real ZooKeeper servers (JVMs) with a quorum on
/// loopback, each with its own client port and temporary data directory.
///
/// Members are addressed by index `0..len()`; member `i` has ZooKeeper
/// server id `i + 1`. Dropping the cluster kills every member and removes
/// the directories. See the [module docs](super) for the configuration.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use zklock::testing::TestingCluster;
///
/// let mut cluster = TestingCluster::start(3)?;
/// let connect = cluster.connect_string(); // "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
///
/// let old = cluster.wait_for_leader(Duration::from_secs(30))?;
/// cluster.kill(old)?; // crash the leader
/// let new = cluster.wait_for_leader(Duration::from_secs(30))?;
/// assert_ne!(old, new);
/// cluster.restart(old)?; // rejoins as a follower
/// # let _ = connect;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingCluster {
    // Declared first so that the JVMs die before their directories are removed.
    members: Vec<Instance>,
    dir: tempfile::TempDir,
}

impl TestingCluster {
    /// Starts an ensemble of `n` servers (`n` must be 1, 3 or 5, else
    /// [`io::ErrorKind::InvalidInput`]) and waits (up to 60 s) until every
    /// member serves and one is the leader.
    ///
    /// A one-member "ensemble" runs in standalone mode; it counts as its own
    /// leader. Fails with [`io::ErrorKind::NotFound`] when Java or ZooKeeper is
    /// not installed, and with the tail of a member's log when it does not come up.
    pub fn start(n: usize) -> io::Result<TestingCluster> {
        if !matches!(n, 1 | 3 | 5) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a TestingCluster has 1, 3 or 5 members, not {n}"),
            ));
        }
        java()?;
        classpath()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(n) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    tracing::debug!("zklock::testing: port taken, trying another set: {e}");
                    last = Some(e);
                }
                result => return result,
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free ports")))
    }

    fn try_start(n: usize) -> io::Result<TestingCluster> {
        let deadline = Instant::now() + START_TIMEOUT;
        let dir = tempfile::Builder::new()
            .prefix("zklock-zk-cluster-")
            .tempdir()?;
        let ports = free_ports(3 * n)?;
        let peers: Vec<(u16, u16)> = (0..n)
            .map(|i| (ports[3 * i + 1], ports[3 * i + 2]))
            .collect();
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let member_dir = dir.path().join(format!("server-{}", i + 1));
            let quorum = Quorum {
                peers: &peers,
                myid: i + 1,
            };
            write_config(&member_dir, ports[3 * i], Some(quorum), false)?;
            members.push(Instance::new(member_dir, ports[3 * i]));
        }
        let cluster = TestingCluster { members, dir };
        for member in &cluster.members {
            member.launch()?;
        }
        let all: Vec<&Instance> = cluster.members.iter().collect();
        wait_serving(&all, deadline)?;
        let left = deadline.saturating_duration_since(Instant::now());
        cluster.wait_for_leader(left.max(Duration::from_secs(1)))?;
        Ok(cluster)
    }

    /// The connect string of the whole ensemble: `"127.0.0.1:p1,127.0.0.1:p2,..."`.
    pub fn connect_string(&self) -> String {
        let addrs: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect();
        addrs.join(",")
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never true for a started cluster).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn member(&self, i: usize) -> &Instance {
        match self.members.get(i) {
            Some(m) => m,
            None => panic!(
                "TestingCluster has {} members, no member {i}",
                self.members.len()
            ),
        }
    }

    /// The connect string of member `i` alone: `"127.0.0.1:PORT"`.
    ///
    /// # Panics
    ///
    /// When `i >= len()` (as do the other per-member methods).
    pub fn connect_string_of(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.member(i).port())
    }

    /// The client port of member `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.member(i).port()
    }

    /// The JVM process id of member `i`; `None` when it is not running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.member(i).pid()
    }

    /// The data directory of member `i`.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.member(i).data_dir()
    }

    /// The log file (JVM stdout and stderr) of member `i`.
    pub fn log_file(&self, i: usize) -> PathBuf {
        self.member(i).log_file()
    }

    /// The index of the current leader: the member whose `srvr` answers
    /// `Mode: leader` (or `Mode: standalone` in a one-member cluster).
    ///
    /// `None` while there is no leader (an election is running) or when more
    /// than one member claims to lead (an isolated old leader has not noticed
    /// yet). Members that are down or paused are skipped (a paused one after
    /// a ~2 s timeout).
    pub fn leader(&self) -> Option<usize> {
        let mut leaders = (0..self.members.len()).filter(|&i| {
            self.members[i].pid().is_some()
                && matches!(
                    self.members[i].four_letter("srvr").as_deref().map(mode),
                    Ok(Some("leader" | "standalone"))
                )
        });
        match (leaders.next(), leaders.next()) {
            (Some(i), None) => Some(i),
            _ => None,
        }
    }

    /// Polls [`leader`](Self::leader) until there is one, or fails with
    /// [`io::ErrorKind::TimedOut`] after `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader() {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                let modes: Vec<String> = (0..self.members.len())
                    .map(|i| match self.members[i].four_letter("srvr") {
                        Ok(srvr) => format!("{i}: {}", mode(&srvr).unwrap_or("not serving")),
                        Err(e) => format!("{i}: {e}"),
                    })
                    .collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no ZooKeeper leader within {timeout:?} ({})",
                        modes.join("; ")
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills member `i` abruptly (SIGKILL) and reaps it, like a crash.
    /// Does nothing when it is not running.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        self.member(i).kill()
    }

    /// Stops member `i` gracefully (SIGTERM, SIGKILL after a few seconds).
    /// Does nothing when it is not running.
    pub fn stop(&mut self, i: usize) -> io::Result<()> {
        self.member(i).stop()
    }

    /// Stops member `i` if it is running, then starts it again on the same
    /// ports and data directory and waits (up to 60 s) until it serves, which
    /// needs a quorum of the ensemble to be up.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        let member = self.member(i);
        member.stop()?;
        relaunch(member)
    }

    /// Stops every member that is running, starts them all again on the same ports and data
    /// directories, and waits (up to 60 s) until every one serves: the way back from a whole
    /// ensemble down, where [`restart`](Self::restart) one member at a time would wait for a
    /// quorum that cannot form.
    pub fn restart_all(&mut self) -> io::Result<()> {
        for member in &self.members {
            member.stop()?;
        }
        for member in &self.members {
            member.launch()?;
        }
        let all: Vec<&Instance> = self.members.iter().collect();
        wait_serving(&all, Instant::now() + START_TIMEOUT)
    }

    /// Freezes member `i` (SIGSTOP).
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.member(i).pause()
    }

    /// Thaws member `i` (SIGCONT).
    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.member(i).resume()
    }

    /// Sends a four-letter word to member `i` (see
    /// [`TestingServer::four_letter`](super::TestingServer::four_letter)).
    pub fn four_letter(&self, i: usize, cmd: &str) -> io::Result<String> {
        self.member(i).four_letter(cmd)
    }
}

impl Drop for TestingCluster {
    fn drop(&mut self) {
        for member in &self.members {
            let _ = member.kill();
        }
    }
}

impl std::fmt::Debug for TestingCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingCluster")
            .field("connect_string", &self.connect_string())
            .field("dir", &self.dir.path())
            .finish()
    }
}
