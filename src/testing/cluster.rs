//! [`TestingCluster`]: a ZooKeeper ensemble of real JVMs on loopback.

use std::io;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use super::config::{
    classpath, free_ports, java, write_config, Peer, Quorum, SUPER_AUTH, SUPER_DIGEST_FLAG,
};
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
    /// How the configuration names member `i`.
    peers: Vec<Peer>,
    /// Whether member `i` is in the ensemble's configuration now.
    in_config: Vec<bool>,
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
        let peers: Vec<Peer> = (0..n)
            .map(|i| Peer {
                id: i + 1,
                client: ports[3 * i],
                peer: ports[3 * i + 1],
                election: ports[3 * i + 2],
            })
            .collect();
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            members.push(member(dir.path(), &peers, peers[i])?);
        }
        let cluster = TestingCluster {
            members,
            in_config: vec![true; n],
            peers,
            dir,
        };
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

/// Member `me` set up in `dir/server-<id>` with `peers` (itself among them) as its first
/// configuration, able to be reconfigured by [`SUPER_AUTH`]; not started.
fn member(dir: &std::path::Path, peers: &[Peer], me: Peer) -> io::Result<Instance> {
    let member_dir = dir.join(format!("server-{}", me.id));
    let quorum = Quorum { peers, myid: me.id };
    write_config(&member_dir, me.client, Some(quorum), false)?;
    Ok(Instance::new(member_dir, me.client).with_jvm_args(vec![SUPER_DIGEST_FLAG.to_owned()]))
}

/// Dynamic reconfiguration and rolling restarts.
impl TestingCluster {
    /// Starts `n` new members and adds them to the ensemble with one `reconfig -add` (as the
    /// superuser); returns their indices. Each new member starts with the current
    /// configuration plus itself, syncs with the leader, then becomes a voting member.
    /// Waits (up to 60 s) for each to serve and for the reconfiguration to be committed.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::testing::TestingCluster;
    /// let mut cluster = TestingCluster::start(3)?;
    /// let added = cluster.add_members(2)?; // [3, 4]
    /// cluster.remove_members(&[0, 1, 2])?; // the ensemble is now members 3 and 4
    /// assert_eq!(cluster.members_in_config(), added);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn add_members(&mut self, n: usize) -> io::Result<Vec<usize>> {
        let ports = free_ports(3 * n)?;
        let first = self.members.len();
        let mut current: Vec<Peer> = self.config_peers();
        let mut added = Vec::new();
        for k in 0..n {
            let me = Peer {
                id: self.peers.iter().map(|p| p.id).max().unwrap_or(0) + 1,
                client: ports[3 * k],
                peer: ports[3 * k + 1],
                election: ports[3 * k + 2],
            };
            let mut peers = current.clone();
            peers.push(me);
            let instance = member(self.dir.path(), &peers, me)?;
            self.members.push(instance);
            self.peers.push(me);
            self.in_config.push(false);
            let i = self.members.len() - 1;
            relaunch(&self.members[i])?;
            added.push(i);
            current.push(me);
        }
        let joining: Vec<String> = (first..self.members.len())
            .map(|i| self.peers[i].config_line())
            .collect();
        self.reconfig(&joining, &[])?;
        for &i in &added {
            self.in_config[i] = true;
        }
        Ok(added)
    }

    /// Removes members from the ensemble with one `reconfig -remove` (as the superuser). They
    /// keep running (a removed member serves no one); stop them with [`stop`](Self::stop).
    pub fn remove_members(&mut self, members: &[usize]) -> io::Result<()> {
        let leaving: Vec<String> = members
            .iter()
            .map(|&i| self.peers[self.index(i)].id.to_string())
            .collect();
        self.reconfig(&[], &leaving)?;
        for &i in members {
            self.in_config[i] = false;
        }
        Ok(())
    }

    /// The members in the ensemble's configuration, by index.
    pub fn members_in_config(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.in_config[i])
            .collect()
    }

    /// The ensemble's configuration as a member serves it (the data of `/zookeeper/config`).
    pub fn config(&self) -> io::Result<String> {
        let data = self
            .with_super_client(|zk| async move { zk.get_config().await.map(|(data, _)| data) })?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }

    /// Restarts the members in `order`, one at a time: each is stopped gracefully, started
    /// again and waited for (up to 60 s) until it serves and every member of the configuration
    /// that is running answers as leader or follower again, before the next one goes down —
    /// the way operators upgrade an ensemble without losing its quorum.
    pub fn rolling_restart(&mut self, order: &[usize]) -> io::Result<()> {
        for &i in order {
            let member = self.member(i);
            member.stop()?;
            relaunch(member)?;
            self.wait_for_quorum(START_TIMEOUT)?;
        }
        Ok(())
    }

    /// The members of the configuration in the usual operator order for a rolling restart:
    /// the followers first and the leader last (`leader_last`), or the leader first.
    pub fn restart_order(&self, leader_last: bool) -> io::Result<Vec<usize>> {
        let leader = self.wait_for_leader(START_TIMEOUT)?;
        let mut order: Vec<usize> = self
            .members_in_config()
            .into_iter()
            .filter(|&i| i != leader)
            .collect();
        if leader_last {
            order.push(leader);
        } else {
            order.insert(0, leader);
        }
        Ok(order)
    }

    /// Waits until every running member of the configuration answers `srvr` as leader or
    /// follower and exactly one leads.
    pub fn wait_for_quorum(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let all_in = self.members_in_config().into_iter().all(|i| {
                self.members[i].pid().is_none()
                    || matches!(
                        self.members[i].four_letter("srvr").as_deref().map(mode),
                        Ok(Some("leader" | "follower"))
                    )
            });
            if all_in && self.leader().is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the ensemble did not settle within {timeout:?}"),
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn index(&self, i: usize) -> usize {
        let _ = self.member(i);
        i
    }

    fn config_peers(&self) -> Vec<Peer> {
        self.members_in_config()
            .into_iter()
            .map(|i| self.peers[i])
            .collect()
    }

    /// One `reconfig` as the superuser, through a running member of the configuration.
    fn reconfig(&self, joining: &[String], leaving: &[String]) -> io::Result<()> {
        let joining: Vec<String> = joining.to_vec();
        let leaving: Vec<String> = leaving.to_vec();
        self.with_super_client(move |zk| {
            let (joining, leaving) = (joining.clone(), leaving.clone());
            async move {
                let update = zookeeper_client::EnsembleUpdate::Incremental {
                    joinings: joining.iter().map(String::as_str),
                    leavings: leaving.iter().map(String::as_str),
                };
                zk.update_ensemble(update, None).await.map(|_| ())
            }
        })?;
        self.wait_for_quorum(START_TIMEOUT)
    }

    /// Runs `op` with a wire client authenticated as the superuser, connected to the running
    /// members of the configuration; retried for up to a minute on connection trouble.
    fn with_super_client<T, F, Fut>(&self, op: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: Fn(zookeeper_client::Client) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<T, zookeeper_client::Error>> + Send,
    {
        let hosts: Vec<String> = self
            .members_in_config()
            .into_iter()
            .filter(|&i| self.members[i].pid().is_some())
            .map(|i| self.connect_string_of(i))
            .collect();
        let hosts = hosts.join(",");
        let runtime = crate::zookeeper::client::Runtime::start()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let target = hosts.clone();
        runtime.spawn(async move {
            let hosts = target;
            let deadline = Instant::now() + START_TIMEOUT;
            let result = loop {
                let attempt = async {
                    let zk = zookeeper_client::Client::connector()
                        .with_session_timeout(Duration::from_secs(10))
                        .with_auth("digest", SUPER_AUTH.as_bytes())
                        .connect(&hosts)
                        .await?;
                    op(zk).await
                };
                match attempt.await {
                    Err(
                        e @ (zookeeper_client::Error::ConnectionLoss
                        | zookeeper_client::Error::Timeout
                        | zookeeper_client::Error::NoHosts),
                    ) if Instant::now() < deadline => {
                        tracing::debug!("zklock::testing: reconfig: {e}; trying again");
                        async_io::Timer::after(Duration::from_millis(250)).await;
                    }
                    other => break other,
                }
            };
            let _ = tx.send(result);
        });
        let result = rx
            .recv_timeout(START_TIMEOUT + Duration::from_secs(10))
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "reconfig did not answer"));
        runtime.shutdown();
        result?.map_err(|e| io::Error::other(format!("reconfig of {hosts}: {e}")))
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
