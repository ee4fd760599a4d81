//! [`TestingRedisCluster`]: a Redis Cluster on loopback — three primaries and three replicas,
//! all Debian's `redis-server` with `cluster-enabled yes` — with the faults a failover test
//! needs.

use std::io;
use std::time::{Duration, Instant};

use super::redis::{command_at, TlsChoice};
use super::TestingRedis;

/// How long the cluster may take to come up, and a failover to finish.
const PATIENCE: Duration = Duration::from_secs(60);

/// The number of hash slots.
const SLOTS: u32 = 16384;

/// A Redis Cluster on `127.0.0.1`: three primaries, each with one replica, every node a
/// [`TestingRedis`] (its own free port, cluster bus port and temporary directory, no
/// persistence unless [`start_persistent`](Self::start_persistent)) with
/// `cluster-node-timeout 1000`, so that a primary killed or paused is replaced by its replica
/// within a few seconds. The slots are split in three even ranges (`CLUSTER ADDSLOTSRANGE`),
/// the nodes introduced with `CLUSTER MEET` and the replicas attached with `CLUSTER
/// REPLICATE`, as `redis-cli --cluster create … --cluster-replicas 1` does. Every node also
/// listens on `::1` where the loopback has IPv6, so that `CONFIG SET cluster-announce-ip ::1`
/// on each makes it a cluster whose maps and redirects name `::1`.
///
/// [`url`](Self::url) is the `redis+cluster://` URL a Client connects with. Faults:
/// [`kill_primary_of`](Self::kill_primary_of) (`kill -9`),
/// [`pause_primary_of`](Self::pause_primary_of) (SIGSTOP; [`resume_node`](Self::resume_node)),
/// [`failover`](Self::failover) (`CLUSTER FAILOVER` on a replica: it takes over from its
/// running primary), and [`wait_for_new_primary`](Self::wait_for_new_primary). Every process
/// is killed (by its pid) when it is dropped, and by the kernel if the test process dies; each
/// runs under the process title `zklock-redis-PORT`, as [`TestingRedis`] does.
///
/// [`start_tls`](Self::start_tls) starts a cluster whose nodes also listen for TLS, with
/// certificates of one throwaway CA ([`tls`](Self::tls)), the cluster bus and replication
/// over TLS (`tls-cluster yes`, `tls-replication yes`); [`tls_url`](Self::tls_url) is its
/// `rediss+cluster://` URL. A TLS client's `CLUSTER SLOTS` and redirects name the nodes'
/// TLS ports, a plain client's their plain ports; the ports the methods take and return are
/// the plain ones.
///
/// # Example
/// ```no_run
/// let cluster = zklock::testing::TestingRedisCluster::start()?;
/// println!("connect with {}", cluster.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingRedisCluster {
    /// The three first primaries, then their replicas (roles change with failovers).
    nodes: Vec<TestingRedis>,
    /// A TLS cluster's certificates, and the directory of their files (removed last).
    tls: Option<(super::TestingTls, tempfile::TempDir)>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    primary: bool,
    failed: bool,
    /// The primary's id, for a replica.
    of: String,
    /// The slot ranges served, for a primary.
    slots: Vec<(u32, u32)>,
}

impl TestingRedisCluster {
    /// Starts the cluster and waits until every node reports `cluster_state:ok`, every node
    /// knows all six and each replica has synced with its primary.
    ///
    /// # Errors
    /// As [`TestingRedis::start`]; `TimedOut` if the cluster is not formed within 60 s.
    pub fn start() -> io::Result<TestingRedisCluster> {
        Self::launch(false, None)
    }

    /// As [`start`](Self::start), every node also listening for TLS on a second port
    /// (`tls-port`) with certificates of one throwaway CA made with the `openssl` command,
    /// which name `localhost` and `127.0.0.1`; the cluster bus and replication over TLS. With
    /// `require_client_certificate` every node asks its TLS clients for a certificate of that
    /// CA (`tls-auth-clients yes`; [`TestingTls::client_cert_pem`](super::TestingTls::client_cert_pem)).
    ///
    /// # Errors
    /// As [`start`](Self::start); when `openssl` does not run.
    pub fn start_tls(require_client_certificate: bool) -> io::Result<TestingRedisCluster> {
        Self::launch(false, Some(require_client_certificate))
    }

    /// As [`start`](Self::start), with every node's writes in an append-only file fsynced
    /// every write, so that a [`restart`](Self::restart) keeps the locks.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_persistent() -> io::Result<TestingRedisCluster> {
        Self::launch(true, None)
    }

    fn launch(persistent: bool, tls: Option<bool>) -> io::Result<TestingRedisCluster> {
        let tls = match tls {
            Some(need) => {
                let dir = tempfile::Builder::new()
                    .prefix("zklock-redis-cluster-tls-")
                    .tempdir()?;
                let (certificates, _) = super::tls::certificates(dir.path(), need)?;
                Some((certificates, dir))
            }
            None => None,
        };
        let mut nodes = Vec::new();
        for _ in 0..6 {
            let choice = tls.as_ref().map(|(certificates, dir)| {
                TlsChoice::Shared(certificates.clone(), dir.path().join("tls"))
            });
            nodes.push(TestingRedis::start_cluster_node(persistent, choice)?);
        }
        let cluster = TestingRedisCluster { nodes, tls };
        for (i, node) in cluster.nodes[..3].iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(0);
            let (start, end) = (SLOTS * i / 3, SLOTS * (i + 1) / 3 - 1);
            node.command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &start.to_string(),
                &end.to_string(),
            ])?;
        }
        // The bus port is not the default (port + 10000): MEET names it.
        let first = cluster.nodes[0].port().to_string();
        let bus = cluster.nodes[0].cluster_port().unwrap_or(0).to_string();
        for node in &cluster.nodes[1..] {
            node.command(&["CLUSTER", "MEET", "127.0.0.1", &first, &bus])?;
        }
        let deadline = Instant::now() + PATIENCE;
        // A handshake not finished within the node timeout (a loaded machine, a TLS bus) is
        // dropped, and the node never learns of the other: such a node is introduced again,
        // once a second (MEET of a known node changes nothing).
        let mut met = Instant::now();
        cluster.wait_until(deadline, "every node to know the six", |c| {
            let lonely: Vec<_> = (c.nodes.iter())
                .filter(|n| !lines(n.port()).is_ok_and(|l| l.len() == 6))
                .collect();
            if !lonely.is_empty() && met.elapsed() >= Duration::from_secs(1) {
                met = Instant::now();
                for node in &lonely {
                    let _ = node.command(&["CLUSTER", "MEET", "127.0.0.1", &first, &bus]);
                }
            }
            lonely.is_empty()
        })?;
        for i in 0..3 {
            let id = cluster.nodes[i].command(&["CLUSTER", "MYID"])?;
            let replica = &cluster.nodes[i + 3];
            // A replica refuses until it has heard of its primary through the gossip.
            cluster.wait_until(deadline, "a replica to take its primary", |_| {
                replica.command(&["CLUSTER", "REPLICATE", &id]).is_ok()
            })?;
        }
        cluster.wait_until(deadline, "cluster_state:ok and the replicas synced", |c| {
            c.nodes.iter().all(|n| {
                n.command(&["CLUSTER", "INFO"])
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            }) && c.nodes[3..].iter().all(|n| {
                n.command(&["INFO", "replication"])
                    .is_ok_and(|i| i.contains("master_link_status:up"))
            }) && c
                .nodes
                .iter()
                .all(|n| lines(n.port()).is_ok_and(|l| l.iter().filter(|l| l.primary).count() == 3))
        })?;
        Ok(cluster)
    }

    fn wait_until(
        &self,
        deadline: Instant,
        what: &str,
        mut done: impl FnMut(&Self) -> bool,
    ) -> io::Result<()> {
        while !done(self) {
            if Instant::now() > deadline {
                let nodes = command_at(self.nodes[0].port(), &["CLUSTER", "NODES"]);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("waited 60 s for {what}; CLUSTER NODES: {nodes:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3` (the first three nodes as
    /// seeds).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// `rediss+cluster://localhost:T1,localhost:T2,localhost:T3` (the first three nodes' TLS
    /// ports as seeds) for a [`start_tls`](Self::start_tls) cluster; `None` for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        let seeds: Option<Vec<String>> = self.nodes[..3]
            .iter()
            .map(|n| n.tls_port().map(|p| format!("localhost:{p}")))
            .collect();
        Some(format!("rediss+cluster://{}", seeds?.join(",")))
    }

    /// The certificates of a [`start_tls`](Self::start_tls) cluster: one CA signed every
    /// node's.
    pub fn tls(&self) -> Option<&super::TestingTls> {
        self.tls.as_ref().map(|(certificates, _)| certificates)
    }

    /// The six nodes: the three first primaries, then their replicas (roles change with
    /// failovers; [`primary_of`](Self::primary_of) says which serves a key now).
    pub fn nodes(&self) -> &[TestingRedis] {
        &self.nodes
    }

    /// The node on `port`.
    ///
    /// # Errors
    /// When no node of this cluster has that port.
    pub fn node(&self, port: u16) -> io::Result<&TestingRedis> {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no node on port {port}")))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    ///
    /// # Errors
    /// When no node answers.
    pub fn slot_of(&self, key: &str) -> io::Result<u32> {
        let answer = self.any_command(&["CLUSTER", "KEYSLOT", key])?;
        answer
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, answer))
    }

    /// The primary that serves `key` now, as the first running node that answers sees it.
    ///
    /// # Errors
    /// When no node answers, or none serves the slot.
    pub fn primary_of(&self, key: &str) -> io::Result<&TestingRedis> {
        let slot = self.slot_of(key)?;
        let port = self.owner(slot, None)?;
        self.node(port)
    }

    /// The port of the primary serving `slot` as the node on `asked` (else the first running
    /// one) sees it.
    fn owner(&self, slot: u32, asked: Option<u16>) -> io::Result<u16> {
        let seen = match asked {
            Some(port) => lines(port)?,
            None => self.any_lines()?,
        };
        seen.iter()
            .find(|l| {
                l.primary && !l.failed && l.slots.iter().any(|(a, b)| *a <= slot && slot <= *b)
            })
            .map(|l| l.port)
            .ok_or_else(|| io::Error::other(format!("no primary serves slot {slot}")))
    }

    /// The replicas of the primary on `port`, as the first running node that answers sees them.
    ///
    /// # Errors
    /// When no node answers.
    pub fn replicas_of(&self, port: u16) -> io::Result<Vec<u16>> {
        let seen = self.any_lines()?;
        let id = seen
            .iter()
            .find(|l| l.port == port)
            .map(|l| l.id.clone())
            .unwrap_or_default();
        Ok(seen
            .iter()
            .filter(|l| !l.primary && l.of == id)
            .map(|l| l.port)
            .collect())
    }

    /// Kills the primary serving `key` with SIGKILL; returns its port. Its replica takes over
    /// within a few seconds ([`wait_for_new_primary`](Self::wait_for_new_primary)).
    ///
    /// # Errors
    /// As [`primary_of`](Self::primary_of).
    pub fn kill_primary_of(&mut self, key: &str) -> io::Result<u16> {
        let port = self.primary_of(key)?.port();
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other("the primary is not of this cluster"))?
            .kill()?;
        Ok(port)
    }

    /// Starts the node on `port` again on its port and directory after a
    /// [`kill_primary_of`](Self::kill_primary_of) (stopping it first if it runs): it rejoins
    /// the cluster from its `nodes.conf`, as a replica of the node that took its slots over,
    /// and is waited for until it has synced with that primary.
    ///
    /// # Errors
    /// As [`TestingRedis::restart`]; `TimedOut` if it is not a synced replica within 60 s.
    pub fn restart_node(&mut self, port: u16) -> io::Result<()> {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no node on port {port}")))?;
        node.restart()?;
        self.wait_until(
            Instant::now() + PATIENCE,
            "the restarted node to sync as a replica",
            |c| {
                c.node(port)
                    .and_then(|n| n.command(&["INFO", "replication"]))
                    .is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
            },
        )
    }

    /// Stops the primary serving `key` with SIGSTOP; returns its port. Its replica takes
    /// over after the node timeout; [`resume_node`](Self::resume_node) lets it run again (it
    /// then becomes a replica).
    ///
    /// # Errors
    /// As [`primary_of`](Self::primary_of).
    pub fn pause_primary_of(&self, key: &str) -> io::Result<u16> {
        let primary = self.primary_of(key)?;
        primary.pause()?;
        Ok(primary.port())
    }

    /// Lets the node on `port` run again after a pause.
    ///
    /// # Errors
    /// When no node has that port, or it is not running.
    pub fn resume_node(&self, port: u16) -> io::Result<()> {
        self.node(port)?.resume()
    }

    /// `CLUSTER FAILOVER` on a replica of the primary serving `key`, once the replica is in
    /// step with it (a replica still syncing — one just demoted by the last failover —
    /// accepts the command and then lets it time out): the replica takes over while the old
    /// primary runs (which becomes its replica and redirects its clients with `MOVED`).
    /// Returns the old primary's port.
    ///
    /// # Errors
    /// When the primary has no replica, the replica is not in step within 60 s, or it refuses.
    pub fn failover(&self, key: &str) -> io::Result<u16> {
        let old = self.primary_of(key)?.port();
        let replica = *self
            .replicas_of(old)?
            .first()
            .ok_or_else(|| io::Error::other(format!("the primary on {old} has no replica")))?;
        // The replica names its primary by the port it replicates from: the TLS port in a TLS
        // cluster.
        let ports = [Some(old), self.node(old)?.tls_port()];
        self.wait_until(
            Instant::now() + PATIENCE,
            "the replica to be in step with its primary",
            |_| {
                command_at(replica, &["INFO", "replication"]).is_ok_and(|info| {
                    let line = |l: &str| info.lines().any(|i| i.trim_end() == l);
                    line("master_link_status:up")
                        && ports
                            .iter()
                            .flatten()
                            .any(|p| line(&format!("master_port:{p}")))
                })
            },
        )?;
        command_at(replica, &["CLUSTER", "FAILOVER"])?;
        Ok(old)
    }

    /// Waits until the slot of `key` is served by a primary other than the node on `old`, as
    /// every running node but `old` sees it, and that node says it is a primary; returns its
    /// port.
    ///
    /// # Errors
    /// `TimedOut` after 60 s.
    pub fn wait_for_new_primary(&self, key: &str, old: u16) -> io::Result<u16> {
        self.wait_for_new_primary_within(key, old, PATIENCE)
    }

    /// [`wait_for_new_primary`](Self::wait_for_new_primary) for at most `within`: a
    /// [`failover`](Self::failover) that the cluster gave up can be tried again. (A primary
    /// votes for a replica of the same primary at most once in two node timeouts, 2 s here:
    /// a manual failover back to a primary demoted less than that ago times out, 5 s later.)
    ///
    /// # Errors
    /// `TimedOut` after `within`.
    pub fn wait_for_new_primary_within(
        &self,
        key: &str,
        old: u16,
        within: Duration,
    ) -> io::Result<u16> {
        let slot = self.slot_of(key)?;
        let deadline = Instant::now() + within;
        loop {
            let seen: Vec<Option<u16>> = self
                .nodes
                .iter()
                .filter(|n| n.port() != old && n.pid().is_some())
                .map(|n| self.owner(slot, Some(n.port())).ok())
                .collect();
            if let Some(Some(port)) = seen.first() {
                let agreed = seen.iter().all(|s| *s == Some(*port));
                let role = command_at(*port, &["ROLE"]).unwrap_or_default();
                if *port != old && agreed && role.starts_with("master") {
                    return Ok(*port);
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "slot {slot} has no new primary within {within:?}: the nodes see {seen:?}"
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops every node with SIGSTOP.
    ///
    /// # Errors
    /// When a node is not running.
    pub fn pause(&self) -> io::Result<()> {
        self.nodes.iter().try_for_each(TestingRedis::pause)
    }

    /// Lets every node run again (SIGCONT).
    ///
    /// # Errors
    /// When a node is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.nodes.iter().try_for_each(TestingRedis::resume)
    }

    /// Stops every node and starts each again on its port and directory (each keeps its
    /// `nodes.conf`: the cluster forms again as it was; without persistence, empty), and
    /// waits until every node reports `cluster_state:ok`.
    ///
    /// # Errors
    /// As [`TestingRedis::restart`]; `TimedOut` if the cluster is not whole again in 60 s.
    pub fn restart(&mut self) -> io::Result<()> {
        for node in &mut self.nodes {
            node.stop()?;
        }
        for node in &mut self.nodes {
            node.restart()?;
        }
        self.wait_until(Instant::now() + PATIENCE, "cluster_state:ok", |c| {
            c.nodes.iter().all(|n| {
                n.command(&["CLUSTER", "INFO"])
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            })
        })
    }

    /// One command to the first running node that answers, as [`TestingRedis::command`].
    ///
    /// # Errors
    /// The last node's error when none answers.
    pub fn any_command(&self, args: &[&str]) -> io::Result<String> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            match node.command(args) {
                Ok(a) => return Ok(a),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no node runs")))
    }

    /// `command` on the primary that serves `key` now.
    ///
    /// # Errors
    /// As [`primary_of`](Self::primary_of) and [`TestingRedis::command`].
    pub fn command_for(&self, key: &str, args: &[&str]) -> io::Result<String> {
        self.primary_of(key)?.command(args)
    }

    fn any_lines(&self) -> io::Result<Vec<NodeLine>> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            match lines(node.port()) {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no node runs")))
    }
}

/// `CLUSTER NODES` of the node on `port`, parsed.
fn lines(port: u16) -> io::Result<Vec<NodeLine>> {
    let answer = command_at(port, &["CLUSTER", "NODES"])?;
    Ok(answer
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
            let flags = f[2];
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeLine {
                id: f[0].to_owned(),
                port,
                primary: flags.contains("master"),
                failed: flags.contains("fail") && !flags.contains("fail?"),
                of: f[3].to_owned(),
                slots,
            })
        })
        .collect())
}

impl std::fmt::Debug for TestingRedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports: Vec<u16> = self.nodes.iter().map(TestingRedis::port).collect();
        f.debug_struct("TestingRedisCluster")
            .field("ports", &ports)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_starts_serves_every_slot_and_fails_over() {
        let cluster = TestingRedisCluster::start().expect("the cluster starts");
        let primaries: Vec<u16> = ["a", "b", "c", "zklock:{x}"]
            .iter()
            .map(|k| cluster.primary_of(k).unwrap().port())
            .collect();
        assert!(primaries
            .iter()
            .all(|p| cluster.nodes()[..3].iter().any(|n| n.port() == *p)));
        let old = cluster.failover("zklock:{x}").unwrap();
        let new = cluster.wait_for_new_primary("zklock:{x}", old).unwrap();
        assert_ne!(new, old);
        assert_eq!(cluster.primary_of("zklock:{x}").unwrap().port(), new);
    }

    #[test]
    fn a_tls_cluster_starts_and_fails_over() {
        let cluster = TestingRedisCluster::start_tls(false).expect("the cluster starts");
        assert!(cluster
            .tls_url()
            .unwrap()
            .starts_with("rediss+cluster://localhost:"));
        let old = cluster.failover("zklock:{x}").unwrap();
        let new = cluster.wait_for_new_primary("zklock:{x}", old).unwrap();
        assert_ne!(new, old);
    }
}
