//! [`TestingSentinel`]: a Redis Sentinel set on loopback — one primary, two replicas and three
//! sentinels, all Debian's `redis-server` (a sentinel is `redis-server sentinel.conf
//! --sentinel`) — with the faults a failover test needs.

use std::io;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::config::free_ports;
use super::process::{signal, spawn};
use super::redis::{command_at, program};
use super::{ClockOffset, TestingRedis, TestingTls};

/// How long the set may take to come up, and a failover to finish.
const PATIENCE: Duration = Duration::from_secs(60);

/// The name the sentinels monitor the primary under.
const NAME: &str = "zklock";

/// A Sentinel set on `127.0.0.1`: a primary and two replicas ([`TestingRedis`] servers without
/// persistence) and three sentinels monitoring them as `zklock` with a quorum of 2,
/// `down-after-milliseconds 1000` and `failover-timeout 5000`, so that a primary killed or
/// paused is replaced within a few seconds.
///
/// [`url`](Self::url) is the `redis+sentinel://` URL a Client connects with. Faults:
/// [`kill_primary`](Self::kill_primary) (`kill -9`), [`pause_primary`](Self::pause_primary)
/// (SIGSTOP; [`resume`](Self::resume)), [`failover`](Self::failover) (`SENTINEL FAILOVER`:
/// the sentinels promote a replica while the old primary runs), and
/// [`wait_for_new_primary`](Self::wait_for_new_primary). Every process is killed when it is
/// dropped, and by the kernel if the test process dies.
///
/// [`start_tls`](Self::start_tls) starts a set that also listens for TLS, every node and
/// sentinel on a second port with certificates of one throwaway CA ([`tls`](Self::tls)),
/// replication and the sentinels' own connections over TLS; [`tls_url`](Self::tls_url) is
/// its `rediss+sentinel://` URL. The ports the methods take and return are the plain ones
/// (the sentinels of a TLS set name the primary's TLS port; these methods translate).
///
/// # Example
/// ```no_run
/// let set = zklock::testing::TestingSentinel::start()?;
/// println!("connect with {}", set.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingSentinel {
    nodes: Vec<TestingRedis>,
    sentinels: Vec<Sentinel>,
    /// A TLS set's certificates, and the directory of their files (removed last).
    tls: Option<(TestingTls, tempfile::TempDir)>,
}

/// One sentinel process.
struct Sentinel {
    child: Option<Child>,
    port: u16,
    /// Its TLS port, in a TLS set.
    tls_port: Option<u16>,
    dir: tempfile::TempDir,
}

impl TestingSentinel {
    /// Starts the set and waits until every sentinel sees both replicas and both other
    /// sentinels (so that a failover can be agreed on).
    ///
    /// # Errors
    /// As [`TestingRedis::start`]; `TimedOut` if the sentinels do not see the whole set
    /// within 60 s.
    pub fn start() -> io::Result<TestingSentinel> {
        Self::start_plain(None)
    }

    /// As [`start`](Self::start), with the wall clock of the first replica, `nodes()[1]`,
    /// reading `offset` from the host's from its start (the library of
    /// [`TestingRedis::start_with_stepped_clock`] preloaded into it; the host's clock and the
    /// other nodes' are left alone), and the second replica, `nodes()[2]`, never promoted
    /// (`replica-priority 0`): a failover ([`failover`](Self::failover),
    /// [`kill_primary`](Self::kill_primary), [`pause_primary`](Self::pause_primary)) promotes
    /// the replica whose clock differs. Its clock can be stepped again with
    /// [`TestingRedis::set_clock_ahead`] and [`TestingRedis::set_clock_behind`].
    ///
    /// # Example
    /// ```no_run
    /// use std::time::Duration;
    /// use zklock::testing::{ClockOffset, TestingSentinel};
    ///
    /// let behind = ClockOffset::Behind(Duration::from_secs(3600));
    /// let set = TestingSentinel::start_with_replica_clock(behind)?;
    /// let old = set.failover()?;
    /// assert_eq!(set.wait_for_new_primary(old)?, set.nodes()[1].port());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`TestingRedis::start_with_stepped_clock`].
    pub fn start_with_replica_clock(offset: ClockOffset) -> io::Result<TestingSentinel> {
        Self::start_plain(Some(offset))
    }

    /// A set without TLS; with an `offset`, as
    /// [`start_with_replica_clock`](Self::start_with_replica_clock).
    fn start_plain(offset: Option<ClockOffset>) -> io::Result<TestingSentinel> {
        let primary = TestingRedis::start()?;
        let replicas = [
            TestingRedis::replica_with_clock(&primary, offset)?,
            TestingRedis::replica_of(&primary)?,
        ];
        if offset.is_some() {
            // Before the sentinels start, so that their first look at it sees the priority.
            replicas[1].command(&["CONFIG", "SET", "replica-priority", "0"])?;
        }
        let mut nodes = vec![primary];
        nodes.extend(replicas);
        Self::watch(TestingSentinel {
            nodes,
            sentinels: Vec::new(),
            tls: None,
        })
    }

    /// As [`start`](Self::start), every node and sentinel also listening for TLS on a second
    /// port (`tls-port`), with certificates of one throwaway CA made with the `openssl`
    /// command, which name `localhost` and `127.0.0.1`; the replicas replicate and the
    /// sentinels talk to the nodes and to each other over TLS (`tls-replication yes`, each
    /// presenting the client certificate). With `require_client_certificate` every node and
    /// sentinel asks its TLS clients for a certificate of that CA (`tls-auth-clients yes`;
    /// [`TestingTls::client_cert_pem`]).
    ///
    /// # Errors
    /// As [`start`](Self::start); when `openssl` does not run.
    pub fn start_tls(require_client_certificate: bool) -> io::Result<TestingSentinel> {
        Self::start_tls_naming(require_client_certificate, &super::tls::SERVER_NAMES)
    }

    /// As [`start_tls`](Self::start_tls), every node's and sentinel's certificate naming
    /// `names` (DNS names or IP addresses) instead of `localhost` and `127.0.0.1`. With
    /// `&["localhost"]` the sentinels, dialed as `localhost` ([`tls_url`](Self::tls_url)), are
    /// trusted, and the primary they name by its address, `127.0.0.1`, is not: a certificate
    /// must name the address the sentinels give.
    ///
    /// # Errors
    /// As [`start_tls`](Self::start_tls).
    pub fn start_tls_naming(
        require_client_certificate: bool,
        names: &[&str],
    ) -> io::Result<TestingSentinel> {
        let dir = tempfile::Builder::new()
            .prefix("zklock-redis-sentinel-tls-")
            .tempdir()?;
        let (certificates, files) =
            super::tls::certificates_naming(dir.path(), require_client_certificate, names)?;
        let shared = (&certificates, files.as_path());
        let primary = TestingRedis::start_tls_set_node(shared, None)?;
        let replicas = [
            TestingRedis::start_tls_set_node(shared, Some(&primary))?,
            TestingRedis::start_tls_set_node(shared, Some(&primary))?,
        ];
        let mut nodes = vec![primary];
        nodes.extend(replicas);
        Self::watch(TestingSentinel {
            nodes,
            sentinels: Vec::new(),
            tls: Some((certificates, dir)),
        })
    }

    /// Starts the three sentinels of `set` and waits until each sees the whole set.
    fn watch(mut set: TestingSentinel) -> io::Result<TestingSentinel> {
        let primary = &set.nodes[0];
        let primary_port = primary.tls_port().unwrap_or(primary.port());
        let files = set.tls.as_ref().map(|(_, dir)| dir.path().join("tls"));
        let need = set
            .tls
            .as_ref()
            .is_some_and(|(c, _)| c.requires_client_certificate());
        let ports = free_ports(6)?;
        for i in 0..3 {
            let tls_port = files.as_ref().map(|f| (ports[3 + i], f.as_path(), need));
            set.sentinels
                .push(Sentinel::start(ports[i], tls_port, primary_port)?);
        }
        let deadline = Instant::now() + PATIENCE;
        for i in 0..set.sentinels.len() {
            loop {
                let master = set.sentinel_command(i, &["SENTINEL", "MASTER", NAME]);
                let seen = master.as_deref().map(fields).unwrap_or_default();
                let count = |k: &str| {
                    seen.iter()
                        .find(|(key, _)| key == k)
                        .and_then(|(_, v)| v.parse::<u32>().ok())
                        .unwrap_or(0)
                };
                if count("num-slaves") >= 2 && count("num-other-sentinels") >= 2 {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("sentinel {i} did not see the whole set within 60 s: {master:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(set)
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/zklock`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{NAME}", hosts.join(","))
    }

    /// `rediss+sentinel://localhost:T1,localhost:T2,localhost:T3/zklock` for a
    /// [`start_tls`](Self::start_tls) set (the sentinels' TLS ports); `None` for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        let hosts: Option<Vec<String>> = self
            .sentinels
            .iter()
            .map(|s| s.tls_port.map(|p| format!("localhost:{p}")))
            .collect();
        Some(format!("rediss+sentinel://{}/{NAME}", hosts?.join(",")))
    }

    /// The certificates of a [`start_tls`](Self::start_tls) set: one CA signed every node's
    /// and sentinel's.
    pub fn tls(&self) -> Option<&TestingTls> {
        self.tls.as_ref().map(|(certificates, _)| certificates)
    }

    /// The plain port of the node the sentinels name by `port` (a TLS set's sentinels name
    /// its TLS port).
    fn plain(&self, port: u16) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.tls_port() == Some(port))
            .map_or(port, TestingRedis::port)
    }

    /// The name the sentinels monitor the primary under (`zklock`).
    pub fn master_name(&self) -> &str {
        NAME
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The data nodes: the first primary and its two replicas, in start order (roles change
    /// with failovers; [`primary`](Self::primary) says which is primary now).
    pub fn nodes(&self) -> &[TestingRedis] {
        &self.nodes
    }

    /// The node the sentinels name as primary now (the first sentinel that answers).
    ///
    /// # Errors
    /// When no sentinel answers, or names a node not of this set.
    pub fn primary(&self) -> io::Result<&TestingRedis> {
        let port = self.primary_port()?;
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("the sentinels name port {port}")))
    }

    fn primary_port(&self) -> io::Result<u16> {
        let mut last = None;
        for i in 0..self.sentinels.len() {
            match self.sentinel_command(i, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME]) {
                Ok(addr) => {
                    let port = addr.lines().nth(1).unwrap_or_default();
                    let port = port.parse().map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidData, format!("address {addr:?}"))
                    })?;
                    return Ok(self.plain(port));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no sentinel")))
    }

    /// Kills the primary with SIGKILL; returns its port. The sentinels replace it within a
    /// few seconds ([`wait_for_new_primary`](Self::wait_for_new_primary)).
    ///
    /// # Errors
    /// As [`primary`](Self::primary).
    pub fn kill_primary(&mut self) -> io::Result<u16> {
        let port = self.primary_port()?;
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other("the primary is not of this set"))?;
        node.kill()?;
        Ok(port)
    }

    /// Stops the primary with SIGSTOP; returns its port. The sentinels replace it after a
    /// second; [`resume`](Self::resume) lets it run again (they then make it a replica).
    ///
    /// # Errors
    /// As [`primary`](Self::primary).
    pub fn pause_primary(&self) -> io::Result<u16> {
        let primary = self.primary()?;
        primary.pause()?;
        Ok(primary.port())
    }

    /// Lets the node on `port` run again after [`pause_primary`](Self::pause_primary).
    ///
    /// # Errors
    /// When no node of the set has that port, or it is not running.
    pub fn resume(&self, port: u16) -> io::Result<()> {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no node on port {port}")))?
            .resume()
    }

    /// `SENTINEL FAILOVER zklock` on the first sentinel that takes it: a replica is promoted
    /// and the running primary made a replica (its clients are disconnected). Returns the old
    /// primary's port.
    ///
    /// # Errors
    /// When no sentinel accepts it (one may still be under way).
    pub fn failover(&self) -> io::Result<u16> {
        let old = self.primary_port()?;
        let mut last = None;
        for i in 0..self.sentinels.len() {
            match self.sentinel_command(i, &["SENTINEL", "FAILOVER", NAME]) {
                Ok(_) => return Ok(old),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no sentinel")))
    }

    /// Waits until every sentinel names a primary other than the node on `old`, and that node
    /// says it is a primary; returns its port.
    ///
    /// # Errors
    /// `TimedOut` after 60 s.
    pub fn wait_for_new_primary(&self, old: u16) -> io::Result<u16> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let named: Vec<Option<u16>> = (0..self.sentinels.len())
                .map(|i| {
                    self.sentinel_command(i, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME])
                        .ok()
                        .and_then(|a| a.lines().nth(1).and_then(|p| p.parse().ok()))
                        .map(|p| self.plain(p))
                })
                .collect();
            if let Some(Some(port)) = named.first() {
                let agreed = named.iter().all(|n| *n == Some(*port));
                let role = command_at(*port, &["ROLE"]).unwrap_or_default();
                if *port != old && agreed && role.starts_with("master") {
                    return Ok(*port);
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no new primary within 60 s: the sentinels name {named:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One command to sentinel `i` (0, 1 or 2), answered as [`TestingRedis::command`].
    ///
    /// # Errors
    /// As [`TestingRedis::command`].
    pub fn sentinel_command(&self, i: usize, args: &[&str]) -> io::Result<String> {
        let port = self
            .sentinels
            .get(i)
            .ok_or_else(|| io::Error::other(format!("no sentinel {i}")))?
            .port;
        command_at(port, args)
    }
}

/// A flat `key\nvalue\n…` answer as pairs.
fn fields(answer: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = answer.lines().collect();
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_owned(), c[1].to_owned()))
        .collect()
}

impl Sentinel {
    /// A sentinel on `port` (and on a TLS port, with the certificates in the directory given,
    /// asking clients for a certificate if told to) monitoring the primary on `primary` (its TLS port in a TLS set).
    fn start(
        port: u16,
        tls: Option<(u16, &std::path::Path, bool)>,
        primary: u16,
    ) -> io::Result<Sentinel> {
        let dir = tempfile::Builder::new()
            .prefix("zklock-redis-sentinel-")
            .tempdir()?;
        let conf = dir.path().join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
             logfile sentinel.log\ndir {dir}\n",
            dir = dir.path().display()
        );
        if let Some((tls_port, files, need)) = tls {
            let file = |name: &str| files.join(name).display().to_string();
            text.push_str(&format!(
                "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-client-cert-file {}\ntls-client-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients {}\ntls-replication yes\n",
                file("server.pem"),
                file("server.key"),
                file("client.pem"),
                file("client.key"),
                file("ca.pem"),
                if need { "yes" } else { "no" },
            ));
        }
        text.push_str(&format!(
            "sentinel monitor {NAME} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {NAME} 1000\n\
             sentinel failover-timeout {NAME} 5000\n\
             sentinel parallel-syncs {NAME} 2\n"
        ));
        std::fs::write(&conf, text)?;
        let mut cmd = Command::new(program());
        cmd.current_dir(dir.path())
            .arg(&conf)
            .arg("--sentinel")
            .args([
                "--proc-title-template",
                "{title} zklock-redis-sentinel-{port}",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut sentinel = Sentinel {
            child: Some(spawn(cmd)?),
            port,
            tls_port: tls.map(|(p, _, _)| p),
            dir,
        };
        let deadline = Instant::now() + PATIENCE;
        while command_at(port, &["PING"]).ok().as_deref() != Some("PONG") {
            if let Some(status) = sentinel
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                sentinel.child = None;
                let log = std::fs::read_to_string(sentinel.dir.path().join("sentinel.log"))
                    .unwrap_or_default();
                return Err(io::Error::other(format!(
                    "the sentinel exited ({status}); its log:\n{log}"
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the sentinel did not answer within 60 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(sentinel)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = signal(child.id(), Signal::CONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl std::fmt::Debug for TestingSentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingSentinel")
            .field("nodes", &self.nodes)
            .field("sentinels", &self.sentinel_ports())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_set_starts_and_fails_over() {
        let set = TestingSentinel::start().expect("the set starts");
        let first = set.primary().unwrap().port();
        assert_eq!(first, set.nodes()[0].port());
        let old = set.failover().unwrap();
        let new = set.wait_for_new_primary(old).unwrap();
        assert_ne!(new, first);
        assert_eq!(set.primary().unwrap().port(), new);
    }

    #[test]
    fn a_tls_sentinel_set_starts_and_fails_over() {
        let set = TestingSentinel::start_tls(false).expect("the set starts");
        assert!(set
            .tls_url()
            .unwrap()
            .starts_with("rediss+sentinel://localhost:"));
        let first = set.primary().unwrap().port();
        assert_eq!(first, set.nodes()[0].port());
        let old = set.failover().unwrap();
        let new = set.wait_for_new_primary(old).unwrap();
        assert_ne!(new, first);
        // The sentinels name the new primary by its TLS port.
        let named = set
            .sentinel_command(0, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME])
            .unwrap();
        let tls_port = set.primary().unwrap().tls_port().unwrap();
        assert_eq!(named.lines().nth(1), Some(tls_port.to_string().as_str()));
    }
}
