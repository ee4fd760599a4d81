//! [`TestingMariaDb`]: a real MariaDB server on a free loopback port, for the MySQL backend's
//! tests, examples and benchmarks.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::process::Signal;

use super::config::free_ports;
use super::lifecycle::ServerChild;
use super::process::{all_threads_stopped, signal, spawn};

/// How long a server may take to accept its first connection, or to stop.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The user the tests connect as, over TCP with a password, and its database.
const USER: &str = "zklock";
const DATABASE: &str = "zklock";

/// One MariaDB server (Debian's `mariadb-server` package: `mariadb-install-db` and
/// `/usr/sbin/mariadbd`, or the directory named by `MARIADB_BINDIR`) on `127.0.0.1` and a free
/// port, with fresh data in a temporary directory.
///
/// The data directory is made by `mariadb-install-db --no-defaults`; `root` logs in only over
/// the server's Unix socket in that directory, and the user `zklock` (all privileges) has a
/// random password and a database `zklock`, so that tests connect with a password over TCP as
/// services do. Nothing of the system's configuration is read (`--no-defaults`). When the test
/// runs as root the server runs as root too (`--user=root`).
/// [`start_tls`](Self::start_tls) requires TLS of TCP connections;
/// [`start_with_replica`](Self::start_with_replica) starts a primary and its binlog replica;
/// [`start_galera`](Self::start_galera) starts a Galera cluster, a `TestingMariaDb` per node.
///
/// [`stop`](Self::stop) is a normal shutdown (SIGTERM), [`restart`](Self::restart) stops and
/// starts it on the same port and data, [`kill`](Self::kill) is `kill -9`,
/// [`pause`](Self::pause) / [`resume`](Self::resume) are SIGSTOP / SIGCONT,
/// [`kill_session`](Self::kill_session) is `KILL <id>`. InnoDB writes its log at each commit
/// without flushing it (`innodb_flush_log_at_trx_commit=2`): a killed server loses nothing,
/// only a crash of the machine would.
///
/// Dropping it kills the server and removes the directory; the server also gets SIGKILL from
/// the kernel if the test process dies (a parent-death signal, as for the other servers). The
/// directory's name starts with `zklock-mariadb-`.
///
/// # Example
/// ```no_run
/// let server = zklock::testing::TestingMariaDb::start()?;
/// println!("MariaDB at {}", server.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingMariaDb {
    // Declared first so that the server dies before its directory is removed.
    child: Option<Child>,
    paused: Mutex<bool>,
    port: u16,
    password: String,
    mariadbd: PathBuf,
    client: PathBuf,
    /// The certificates of a server that requires TLS (in `dir/tls`).
    tls: Option<super::TestingTls>,
    role: Role,
    /// A Galera node's ports and peers.
    galera: Option<Galera>,
    /// The wall clock the test steps, if asked for.
    clock: Option<super::clock::SteppedClock>,
    dir: tempfile::TempDir,
}

/// What a Galera node listens on, and whom it joins.
#[derive(Clone)]
struct Galera {
    /// Group communication (`gmcast.listen_addr`, also the node's `wsrep_node_address`).
    gcomm: u16,
    /// Incremental state transfers received (`ist.recv_addr`).
    ist: u16,
    /// Full state transfers received (`wsrep_sst_receive_address`, rsync's daemon).
    sst: u16,
    /// The group communication ports of the nodes it joins; none: it starts a new cluster.
    peers: Vec<u16>,
}

/// What a server is to replication.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// No binary log, no primary.
    Alone,
    /// A binary log (`primary-bin.*`, row format), `server_id` 1.
    Primary,
    /// `server_id` 2, no binary log of its own; its users come from its primary.
    Replica,
    /// A Galera node (wsrep on); one that joins gets everything from its donor.
    Galera,
}

impl TestingMariaDb {
    /// Creates a data directory and starts a server on it.
    ///
    /// # Errors
    /// `NotFound` with what to install when there is no MariaDB; the server's log when it
    /// does not accept connections within 60 s.
    pub fn start() -> io::Result<TestingMariaDb> {
        TestingMariaDb::create(false, Role::Alone, None)
    }

    /// As [`start`](Self::start), with a wall clock — what `NOW()` reads — that the test steps
    /// with [`set_clock_ahead`](Self::set_clock_ahead) and
    /// [`set_clock_behind`](Self::set_clock_behind) while the machine's is not touched: a
    /// small library preloaded into the server adds an offset to every reading of the wall
    /// clock (built with the system's C compiler, `CC` or else `cc`).
    ///
    /// # Errors
    /// As [`start`](Self::start); when the library cannot be built.
    pub fn start_with_stepped_clock() -> io::Result<TestingMariaDb> {
        let mut server = TestingMariaDb::start()?;
        server.clock = Some(super::clock::SteppedClock::build(server.dir.path())?);
        server.restart()?;
        Ok(server)
    }

    /// The server's wall clock reads the host's plus `by` from its next reading on (`ZERO`:
    /// the host's again).
    ///
    /// # Errors
    /// When the server was not started by
    /// [`start_with_stepped_clock`](Self::start_with_stepped_clock), or the offset cannot be
    /// written.
    pub fn set_clock_ahead(&self, by: Duration) -> io::Result<()> {
        self.stepped_clock()?
            .set(super::clock::ClockOffset::Ahead(by).micros())
    }

    /// The server's wall clock reads the host's minus `by` from its next reading on.
    ///
    /// # Errors
    /// As [`set_clock_ahead`](Self::set_clock_ahead).
    pub fn set_clock_behind(&self, by: Duration) -> io::Result<()> {
        self.stepped_clock()?
            .set(super::clock::ClockOffset::Behind(by).micros())
    }

    fn stepped_clock(&self) -> io::Result<&super::clock::SteppedClock> {
        self.clock.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the server's clock can be stepped only when it was started with \
                 TestingMariaDb::start_with_stepped_clock",
            )
        })
    }

    /// A primary and its replica, each as from [`start`](Self::start) but for replication:
    /// the primary writes a binary log (row format) from its first statement, the replica
    /// (a second server with its own directory and port) replicates all of it from the start
    /// (`CHANGE MASTER TO` the primary's first log file, as the user `zklock`), so it has the
    /// same user, password and database. They are returned once the replica has caught up.
    /// [`catch_up`](Self::catch_up) waits for the replica to apply what the primary has
    /// written, [`stop_replication`](Self::stop_replication) holds it back, and
    /// [`promote`](Self::promote) makes it a writable primary (after a
    /// [`kill`](Self::kill) of the old one, say).
    ///
    /// # Errors
    /// As [`start`](Self::start); when the replica does not catch up within 60 s.
    pub fn start_with_replica() -> io::Result<(TestingMariaDb, TestingMariaDb)> {
        let primary = TestingMariaDb::create(false, Role::Primary, None)?;
        let replica = TestingMariaDb::create(false, Role::Replica, Some(primary.password.clone()))?;
        replica.root_sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, \
             MASTER_USER = '{USER}', MASTER_PASSWORD = '{pw}', \
             MASTER_LOG_FILE = 'primary-bin.000001', MASTER_LOG_POS = 4, \
             MASTER_CONNECT_RETRY = 1; START SLAVE",
            port = primary.port,
            pw = primary.password
        ))?;
        replica.catch_up(&primary)?;
        Ok((primary, replica))
    }

    /// A Galera cluster of `nodes` MariaDB servers on `127.0.0.1` (Debian's `galera-4`
    /// provider, `/usr/lib/galera/libgalera_smm.so`, or the file named by `GALERA_PROVIDER`),
    /// each a `TestingMariaDb` with its own directory and free ports for its clients, its group
    /// communication (`gmcast.listen_addr`), incremental state transfers (`ist.recv_addr`) and
    /// full ones (`wsrep_sst_receive_address`). The first node starts a new cluster
    /// (`--wsrep-new-cluster`) and gets the user `zklock`; each of the others joins it in turn
    /// with an empty directory and receives everything by rsync (`wsrep_sst_method = rsync`:
    /// `rsync` must be installed; as root, the nodes run as `nobody`, the user rsync's daemon
    /// writes as, and their directories are `nobody`'s). They are returned once every node reads
    /// `wsrep_cluster_size = nodes` and `Synced` ([`await_galera`](Self::await_galera)).
    ///
    /// A node is left by [`kill`](Self::kill) (`kill -9`) or [`stop`](Self::stop), and
    /// [`restart`](Self::restart) has it join the others again (it receives what it missed by
    /// a state transfer). A node is suspected after 3 s of silence and dropped from the
    /// cluster after 6 s (`evs.suspect_timeout`, `evs.inactive_timeout`); with 3 nodes the 2
    /// that remain keep a quorum, with 2 the one left does not (it refuses queries until the
    /// other is back). Each node's [`url`](Self::url) reaches that node only.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::testing::TestingMariaDb;
    ///
    /// let mut nodes = TestingMariaDb::start_galera(3)?;
    /// for node in &nodes {
    ///     println!("a Galera node at {}", node.url());
    /// }
    /// nodes[0].kill()?;
    /// nodes[1].await_galera(2)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// `NotFound` with what to install when there is no MariaDB, no Galera provider or no
    /// `rsync`; a node's log when it does not start or join within 60 s.
    pub fn start_galera(nodes: usize) -> io::Result<Vec<TestingMariaDb>> {
        if nodes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Galera cluster needs at least one node",
            ));
        }
        galera_provider()?;
        let first = TestingMariaDb::create(false, Role::Galera, None)?;
        let password = first.password.clone();
        let mut all = vec![first];
        for _ in 1..nodes {
            let donors = all
                .iter()
                .filter_map(|n| n.galera.as_ref())
                .map(|g| g.gcomm);
            let node = TestingMariaDb::create_joiner(password.clone(), donors.collect())?;
            node.await_galera(all.len() + 1)?;
            all.push(node);
        }
        // Each node restarts by joining the others.
        let ports: Vec<u16> = all
            .iter()
            .filter_map(|n| n.galera.as_ref())
            .map(|g| g.gcomm)
            .collect();
        for node in &mut all {
            if let Some(g) = node.galera.as_mut() {
                g.peers = ports.iter().copied().filter(|&p| p != g.gcomm).collect();
            }
        }
        for node in &all {
            node.await_galera(nodes)?;
        }
        Ok(all)
    }

    /// This Galera node's `wsrep_cluster_size` and `wsrep_local_state_comment` (`Synced`,
    /// `Donor/Desynced`, `Joining`, …).
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn galera_state(&self) -> io::Result<(usize, String)> {
        let rows = self.root_sql(
            "SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size', \
             'wsrep_local_state_comment')",
        )?;
        let value = |name: &str| {
            rows.iter()
                .find(|r| r.first().map(String::as_str) == Some(name))
                .and_then(|r| r.get(1))
                .cloned()
                .unwrap_or_default()
        };
        Ok((
            value("wsrep_cluster_size").parse().unwrap_or(0),
            value("wsrep_local_state_comment"),
        ))
    }

    /// Waits until this Galera node sees a cluster of `size` nodes and is `Synced`.
    ///
    /// # Errors
    /// When it has not within 60 s (its last state, and its log).
    pub fn await_galera(&self, size: usize) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let state = self.galera_state();
            if let Ok((n, ref s)) = state {
                if n == size && s == "Synced" {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the Galera node on port {} is not Synced in a cluster of {size} \
                         within 60 s ({state:?}); its log:\n{}",
                        self.port,
                        self.log_tail()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until this replica has applied everything `primary` has written so far
    /// (`MASTER_GTID_WAIT` of the primary's `@@gtid_binlog_pos`).
    ///
    /// # Errors
    /// When either server cannot be reached, or the replica has not caught up within 60 s.
    pub fn catch_up(&self, primary: &TestingMariaDb) -> io::Result<()> {
        let pos = primary.root_sql("SELECT @@gtid_binlog_pos")?;
        let pos = pos
            .first()
            .and_then(|r| r.first())
            .cloned()
            .unwrap_or_default();
        let waited = self.root_sql(&format!("SELECT MASTER_GTID_WAIT('{pos}', 60)"))?;
        match waited.first().and_then(|r| r.first()).map(String::as_str) {
            Some("0") => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the replica did not reach the primary's {pos} within 60 s: {:?}",
                    self.root_sql("SHOW SLAVE STATUS")
                ),
            )),
        }
    }

    /// Stops this replica's replication (`STOP SLAVE`): what the primary writes next does not
    /// reach it.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn stop_replication(&self) -> io::Result<()> {
        self.root_sql("STOP SLAVE").map(drop)
    }

    /// Makes this replica a primary: what it has received from its primary applied
    /// (`STOP SLAVE IO_THREAD; START SLAVE SQL_THREAD`, then `MASTER_POS_WAIT` of the last
    /// position read), replication stopped and forgotten (`STOP SLAVE; RESET SLAVE ALL`, which
    /// deletes the relay log) and writes allowed (`read_only = OFF`).
    ///
    /// # Errors
    /// When the server cannot be reached, or has not applied its relay log within 60 s.
    pub fn promote(&self) -> io::Result<()> {
        self.root_sql("STOP SLAVE IO_THREAD; START SLAVE SQL_THREAD")?;
        let status = self.slave_status()?;
        let field = |name: &str| {
            status
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let (file, pos) = (field("Master_Log_File"), field("Read_Master_Log_Pos"));
        if !file.is_empty() {
            let waited = self.root_sql(&format!(
                "SELECT MASTER_POS_WAIT('{}', {}, 60)",
                file.replace('\'', "''"),
                pos.parse::<u64>().unwrap_or(0)
            ))?;
            let waited = waited.first().and_then(|r| r.first()).cloned();
            if !waited
                .as_deref()
                .is_some_and(|w| w.parse::<i64>().is_ok_and(|w| w >= 0))
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the replica did not apply its relay log up to {file}:{pos}: {waited:?}"
                    ),
                ));
            }
        }
        self.root_sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF")
            .map(drop)
    }

    /// As [`start_with_replica`](Self::start_with_replica), with MariaDB's semi-synchronous
    /// replication: the primary answers a commit only once the replica has acknowledged it
    /// (written it to its relay log), and other sessions see it only then
    /// (`rpl_semi_sync_master_enabled`, `rpl_semi_sync_master_wait_point = AFTER_SYNC`;
    /// `rpl_semi_sync_slave_enabled` on the replica). A commit not acknowledged within
    /// `timeout` (`rpl_semi_sync_master_timeout`) is answered anyway, and the primary goes on
    /// asynchronously until the replica catches up. Set with `SET GLOBAL`: a restart of either
    /// server turns it off. Returned once the primary counts the replica as acknowledging
    /// (`Rpl_semi_sync_master_clients = 1`, `Rpl_semi_sync_master_status = ON`).
    ///
    /// # Errors
    /// As [`start_with_replica`](Self::start_with_replica); when the replica is not
    /// acknowledging within 60 s.
    pub fn start_with_semi_sync_replica(
        timeout: Duration,
    ) -> io::Result<(TestingMariaDb, TestingMariaDb)> {
        let (primary, replica) = TestingMariaDb::start_with_replica()?;
        primary.root_sql(&format!(
            "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC; \
             SET GLOBAL rpl_semi_sync_master_timeout = {}; \
             SET GLOBAL rpl_semi_sync_master_enabled = ON",
            timeout.as_millis().max(1)
        ))?;
        replica.root_sql(
            "SET GLOBAL rpl_semi_sync_slave_enabled = ON; STOP SLAVE IO_THREAD; \
             START SLAVE IO_THREAD",
        )?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let status = primary.root_sql(
                "SHOW STATUS WHERE Variable_name IN ('Rpl_semi_sync_master_clients', \
                 'Rpl_semi_sync_master_status')",
            )?;
            let on = status
                .iter()
                .any(|r| r == &["Rpl_semi_sync_master_clients", "1"])
                && status
                    .iter()
                    .any(|r| r == &["Rpl_semi_sync_master_status", "ON"]);
            if on {
                return Ok((primary, replica));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the replica is not acknowledging within 60 s: {status:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SHOW SLAVE STATUS` as (column, value) pairs; none on a server that replicates nothing.
    fn slave_status(&self) -> io::Result<Vec<(String, String)>> {
        let rows = self.run_sql("SHOW SLAVE STATUS", true)?;
        Ok(match rows.as_slice() {
            [names, values, ..] => names.iter().cloned().zip(values.iter().cloned()).collect(),
            _ => Vec::new(),
        })
    }

    /// As [`start`](Self::start), with TLS required of every TCP connection
    /// (`require_secure_transport = ON`; `root` on the socket is not asked): the server's
    /// certificate for `localhost` and `127.0.0.1`, signed by a throwaway CA made with the
    /// `openssl` command ([`tls`](Self::tls)), as `ssl_ca`, `ssl_cert` and `ssl_key`. Connect
    /// with [`url_tls`](Self::url_tls) (`ssl-mode=VERIFY_IDENTITY` and that CA's file).
    ///
    /// # Errors
    /// As [`start`](Self::start); when `openssl` does not run.
    pub fn start_tls() -> io::Result<TestingMariaDb> {
        TestingMariaDb::create(true, Role::Alone, None)
    }

    /// The TLS certificates, for a server from [`start_tls`](Self::start_tls).
    pub fn tls(&self) -> Option<&super::TestingTls> {
        self.tls.as_ref()
    }

    /// The CA file of a server from [`start_tls`](Self::start_tls) (PEM), for `ssl-ca=`.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls
            .as_ref()
            .map(|_| self.dir.path().join("tls").join("ca.pem"))
    }

    /// [`url`](Self::url) with `ssl-mode=VERIFY_IDENTITY&ssl-ca=<the test CA>` for a server
    /// from [`start_tls`](Self::start_tls); the plain URL otherwise.
    pub fn url_tls(&self) -> String {
        match self.ca_file() {
            Some(ca) => format!(
                "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
                self.url(),
                ca.display()
            ),
            None => self.url(),
        }
    }

    /// A server of `role`; a replica gets `password` (its primary's, for the user it will
    /// replicate) and creates no user of its own. A Galera node made here starts a new cluster.
    fn create(tls: bool, role: Role, password: Option<String>) -> io::Result<TestingMariaDb> {
        let (install, mariadbd, client) = programs()?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-mariadb-")
            .tempdir()?;
        // Temporary tables of their own: servers bootstrapping at once in a shared /tmp trip
        // over each other's.
        fs::create_dir(dir.path().join("tmp"))?;
        if role == Role::Galera {
            own_for_galera(dir.path())?;
        }
        let mut cmd = Command::new(&install);
        cmd.env("TMPDIR", dir.path().join("tmp"))
            .arg("--no-defaults")
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg(format!("--datadir={}", dir.path().join("data").display()));
        if let Some(dir) = mariadbd.parent() {
            // The install script looks for the server beside itself, else in its own paths.
            cmd.env(
                "PATH",
                format!(
                    "{}:{}",
                    dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        }
        if let Some(user) = server_user(role) {
            cmd.arg(format!("--user={user}"));
        }
        super::process::run_to_end(cmd.current_dir(dir.path()), "mariadb-install-db")?;
        let tls = if tls {
            let (certificates, path) = super::tls::certificates(dir.path(), false)?;
            // The server reads its key as the user it runs as: ours (or root).
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(path.join("server.key"), fs::Permissions::from_mode(0o600))?;
            Some(certificates)
        } else {
            None
        };
        let mut server = TestingMariaDb {
            child: None,
            paused: Mutex::new(false),
            port: 0,
            password: password.unwrap_or_else(|| format!("pw{:016x}", fastrand::u64(..))),
            mariadbd,
            client,
            tls,
            role,
            galera: None,
            clock: None,
            dir,
        };
        let mut last = None;
        for _ in 0..5 {
            server.pick_ports(Vec::new())?;
            match server.launch() {
                Ok(()) if role == Role::Replica => return Ok(server),
                Ok(()) => {
                    server.root_sql(&format!(
                        "CREATE USER '{USER}'@'%' IDENTIFIED BY '{pw}'; \
                         GRANT ALL ON *.* TO '{USER}'@'%'; CREATE DATABASE {DATABASE};",
                        pw = server.password
                    ))?;
                    return Ok(server);
                }
                Err(e) if server.log().contains("Address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
    }

    /// A Galera node that joins the nodes listening on `donors` (group communication ports)
    /// with an empty data directory, which it receives whole from one of them; its user
    /// `zklock` has `password`, as on the donor.
    fn create_joiner(password: String, donors: Vec<u16>) -> io::Result<TestingMariaDb> {
        let (_, mariadbd, client) = programs()?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-mariadb-")
            .tempdir()?;
        fs::create_dir(dir.path().join("tmp"))?;
        fs::create_dir(dir.path().join("data"))?;
        own_for_galera(dir.path())?;
        let mut node = TestingMariaDb {
            child: None,
            paused: Mutex::new(false),
            port: 0,
            password,
            mariadbd,
            client,
            tls: None,
            role: Role::Galera,
            galera: None,
            clock: None,
            dir,
        };
        let mut last = None;
        for _ in 0..5 {
            node.pick_ports(donors.clone())?;
            match node.launch() {
                Ok(()) => return Ok(node),
                Err(e) if node.log().contains("Address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
    }

    /// Free ports for the server's clients and, for a Galera node (joining `peers`), its
    /// group communication and state transfers.
    fn pick_ports(&mut self, peers: Vec<u16>) -> io::Result<()> {
        let ports = free_ports(4)?;
        self.port = ports[0];
        if self.role == Role::Galera {
            self.galera = Some(Galera {
                gcomm: ports[1],
                ist: ports[2],
                sst: ports[3],
                peers,
            });
        }
        Ok(())
    }

    /// The options of a Galera node: the provider, its addresses, whom it joins (no one: it
    /// starts a new cluster), rsync for full state transfers, and shorter failure detection
    /// than the defaults (5 s and 15 s) so that a test sees a killed node dropped soon.
    fn galera_args(&self) -> io::Result<Vec<String>> {
        let Some(g) = &self.galera else {
            return Ok(Vec::new());
        };
        let peers: Vec<String> = g.peers.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut args = vec![
            "--binlog-format=ROW".to_owned(),
            "--innodb-autoinc-lock-mode=2".to_owned(),
            "--wsrep-on=ON".to_owned(),
            format!("--wsrep-provider={}", galera_provider()?.display()),
            "--wsrep-cluster-name=zklock".to_owned(),
            format!("--wsrep-cluster-address=gcomm://{}", peers.join(",")),
            format!("--wsrep-node-address=127.0.0.1:{}", g.gcomm),
            format!("--wsrep-node-incoming-address=127.0.0.1:{}", self.port),
            "--wsrep-sst-method=rsync".to_owned(),
            format!("--wsrep-sst-receive-address=127.0.0.1:{}", g.sst),
            format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{}; \
                 ist.recv_addr=127.0.0.1:{}; gcache.size=16M; evs.suspect_timeout=PT3S; \
                 evs.inactive_timeout=PT6S; evs.inactive_check_period=PT0.5S; \
                 evs.keepalive_period=PT0.5S",
                g.gcomm, g.ist
            ),
        ];
        if g.peers.is_empty() {
            args.push("--wsrep-new-cluster".to_owned());
        }
        Ok(args)
    }

    fn launch(&mut self) -> io::Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())?;
        let mut cmd = Command::new(&self.mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mariadbd.pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(match self.role {
                Role::Alone => vec!["--skip-log-bin"],
                Role::Primary => vec![
                    "--log-bin=primary-bin",
                    "--server-id=1",
                    "--binlog-format=ROW",
                ],
                // Read-only until promoted (for users without READ_ONLY ADMIN: `zklock`
                // has it, as it has every privilege).
                Role::Replica => vec![
                    "--skip-log-bin",
                    "--server-id=2",
                    "--relay-log=replica-relay-bin",
                    "--read-only",
                ],
                Role::Galera => vec!["--skip-log-bin"],
            })
            .args(self.galera_args()?)
            .arg("--innodb-buffer-pool-size=16M")
            .args([
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=500",
            ])
            .arg("--innodb-log-file-size=8M")
            .args(self.tls_args())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(user) = server_user(self.role) {
            cmd.arg(format!("--user={user}"));
        }
        if let Some(dir) = self.mariadbd.parent().filter(|_| self.galera.is_some()) {
            // The state transfer scripts (wsrep_sst_rsync) are looked for on the PATH.
            cmd.env(
                "PATH",
                format!(
                    "{}:/usr/bin:{}",
                    dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        }
        if let Some(clock) = &self.clock {
            cmd.envs(clock.env());
        }
        self.child = Some(spawn(cmd)?);
        self.wait_answering(
            START_TIMEOUT,
            Duration::from_millis(20),
            "did not accept connections",
        )
    }

    /// The TLS options of a server from [`start_tls`](Self::start_tls).
    fn tls_args(&self) -> Vec<String> {
        if self.tls.is_none() {
            return Vec::new();
        }
        let file = |name: &str| self.dir.path().join("tls").join(name).display().to_string();
        vec![
            format!("--ssl-ca={}", file("ca.pem")),
            format!("--ssl-cert={}", file("server.pem")),
            format!("--ssl-key={}", file("server.key")),
            "--require-secure-transport=ON".to_owned(),
        ]
    }

    /// `mysql://zklock:PASSWORD@127.0.0.1:PORT/zklock`.
    pub fn url(&self) -> String {
        self.url_as(USER, &self.password, DATABASE)
    }

    /// A URL for another user, password or database on this server.
    pub fn url_as(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "mysql://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The password of the user `zklock`.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's directory (`data/`, its socket and `mariadb.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's Unix socket, where `root` logs in without a password.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("mariadb.sock")
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("mariadb.log")
    }

    /// Stops the server (SIGTERM: sessions are ended, their locks freed) and waits for it.
    ///
    /// # Errors
    /// When the server does not exit within 60 s (it is then killed).
    pub fn stop(&mut self) -> io::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        self.resume_all();
        let _ = signal(pid, Signal::TERM);
        self.wait_exited(START_TIMEOUT)
    }

    /// Stops the server and starts it again on the same port and data.
    ///
    /// # Errors
    /// As [`stop`](Self::stop) and [`start`](Self::start).
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.launch()
    }

    /// Kills the server with SIGKILL and waits until it is gone. [`restart`](Self::restart)
    /// then recovers its data from InnoDB's log.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn kill(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let killed = signal(child.id(), Signal::KILL);
        let _ = child.wait();
        *self.paused.lock() = false;
        killed
    }

    /// Stops the server with SIGSTOP (the kernel accepts connections, nothing answers) and
    /// waits until every thread has stopped.
    ///
    /// # Errors
    /// When the server is not running.
    pub fn pause(&self) -> io::Result<()> {
        let pid = self.pid().ok_or_else(not_running)?;
        signal(pid, Signal::STOP)?;
        while !all_threads_stopped(pid) {
            std::thread::sleep(Duration::from_millis(1));
        }
        *self.paused.lock() = true;
        Ok(())
    }

    /// Lets a paused server run again (SIGCONT).
    ///
    /// # Errors
    /// When the server is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.pid().ok_or_else(not_running)?;
        self.resume_all();
        Ok(())
    }

    fn resume_all(&self) {
        let mut paused = self.paused.lock();
        if *paused {
            if let Some(pid) = self.pid() {
                let _ = signal(pid, Signal::CONT);
            }
            *paused = false;
        }
    }

    /// Ends session `id` (`KILL <id>`, as `CONNECTION_ID()` names it); whether there was one.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn kill_session(&self, id: u64) -> io::Result<bool> {
        match self.root_sql(&format!("KILL {id}")) {
            Ok(_) => Ok(true),
            Err(e) if e.to_string().contains("Unknown thread id") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The session (`CONNECTION_ID()`) that holds the user lock `key` (as `GET_LOCK` takes it),
    /// if any: `IS_USED_LOCK`.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn lock_holder(&self, key: &str) -> io::Result<Option<u64>> {
        let rows = self.root_sql(&format!(
            "SELECT IS_USED_LOCK('{}')",
            key.replace('\\', "\\\\").replace('\'', "''")
        ))?;
        Ok(rows
            .first()
            .and_then(|r| r.first())
            .and_then(|v| v.parse().ok()))
    }

    /// Runs `sql` (one or more statements) as `root` over the server's socket with Debian's
    /// `mariadb` client and returns the rows of its output, tab-separated fields as text
    /// (`NULL` as such).
    ///
    /// # Errors
    /// When the client cannot run, the server does not answer within 30 s, or it answers
    /// with an error (its message).
    pub fn root_sql(&self, sql: &str) -> io::Result<Vec<Vec<String>>> {
        self.run_sql(sql, false)
    }

    /// [`root_sql`](Self::root_sql), with the columns' names as the first row if `names`.
    fn run_sql(&self, sql: &str, names: bool) -> io::Result<Vec<Vec<String>>> {
        let mut child = Command::new(&self.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-B", "--connect-timeout=5", "-e", sql])
            .args((!names).then_some("-N"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer within 30 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').map(str::to_owned).collect())
            .collect())
    }
}

impl ServerChild for TestingMariaDb {
    const PROGRAM: &'static str = "mariadbd";

    fn child(&mut self) -> &mut Option<Child> {
        &mut self.child
    }

    fn answers(&self) -> bool {
        self.root_sql("SELECT 1").is_ok()
    }

    fn kill_server(&mut self) -> io::Result<()> {
        self.kill()
    }

    fn log_path(&self) -> PathBuf {
        self.log_file()
    }
}

/// `mariadb-install-db`, `mariadbd` and `mariadb`: from `MARIADB_BINDIR` (all three, or the
/// server in its `../sbin`), else Debian's paths.
fn programs() -> io::Result<(PathBuf, PathBuf, PathBuf)> {
    let (bin, sbin) = match std::env::var_os("MARIADB_BINDIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let sbin = dir.parent().map(|p| p.join("sbin")).unwrap_or(dir.clone());
            (dir, sbin)
        }
        None => (PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")),
    };
    let server = [bin.join("mariadbd"), sbin.join("mariadbd")]
        .into_iter()
        .find(|p| p.exists());
    let install = bin.join("mariadb-install-db");
    let client = bin.join("mariadb");
    match server {
        Some(server) if install.exists() && client.exists() => Ok((install, server, client)),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no MariaDB server (mariadbd, mariadb-install-db, mariadb): install Debian's \
             mariadb-server package (apt-get install mariadb-server, or \
             scripts/ensure-mariadb.sh) or set MARIADB_BINDIR",
        )),
    }
}

/// The Galera provider: `GALERA_PROVIDER`, else Debian's `galera-4`; and `rsync`, which its
/// state transfers use.
fn galera_provider() -> io::Result<PathBuf> {
    let provider = std::env::var_os("GALERA_PROVIDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/galera/libgalera_smm.so"));
    let rsync = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("rsync").exists()))
        .unwrap_or(false)
        || Path::new("/usr/bin/rsync").exists();
    if provider.exists() && rsync {
        return Ok(provider);
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "no Galera provider at {} or no rsync: install Debian's galera-4 and rsync \
             packages (apt-get install galera-4 rsync, or scripts/ensure-mariadb.sh) or set \
             GALERA_PROVIDER",
            provider.display()
        ),
    ))
}

/// The user a server started as root runs as: `root`, but `nobody` for a Galera node — its
/// state transfers run rsync's daemon, which as root writes as `nobody`, so the node's files
/// must be `nobody`'s. `None` when the tests do not run as root (the server runs as them).
fn server_user(role: Role) -> Option<&'static str> {
    match (rustix::process::getuid().is_root(), role) {
        (false, _) => None,
        (true, Role::Galera) => Some("nobody"),
        (true, _) => Some("root"),
    }
}

/// As root, gives a Galera node's directory `dir`, and its `tmp` and `data` if they exist, to
/// `nobody` ([`server_user`]).
fn own_for_galera(dir: &Path) -> io::Result<()> {
    if server_user(Role::Galera) != Some("nobody") {
        return Ok(());
    }
    let (uid, gid) = nobody()?;
    for path in [dir.to_owned(), dir.join("tmp"), dir.join("data")] {
        if path.exists() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// The uid and gid of `nobody`, from `/etc/passwd`.
fn nobody() -> io::Result<(u32, u32)> {
    fs::read_to_string("/etc/passwd")?
        .lines()
        .find_map(|line| {
            // name:password:uid:gid:…
            let mut fields = line.split(':');
            if fields.next()? != "nobody" {
                return None;
            }
            Some((fields.nth(1)?.parse().ok()?, fields.next()?.parse().ok()?))
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no user nobody in /etc/passwd"))
}

fn not_running() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the server is not running")
}

impl Drop for TestingMariaDb {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

impl std::fmt::Debug for TestingMariaDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingMariaDb")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_keeps_data_across_restart_and_kill_and_is_gone_when_dropped() {
        let mut server = TestingMariaDb::start().expect("mariadbd starts");
        server
            .root_sql(
                "CREATE TABLE zklock.t (v int) ENGINE=InnoDB; INSERT INTO zklock.t VALUES (7)",
            )
            .unwrap();
        server.restart().unwrap();
        assert_eq!(server.root_sql("SELECT v FROM zklock.t").unwrap(), [["7"]]);
        server.kill().unwrap();
        server.restart().unwrap();
        assert_eq!(server.root_sql("SELECT v FROM zklock.t").unwrap(), [["7"]]);
        let pid = server.pid().unwrap();
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert!(!dir.exists());
    }

    #[test]
    fn a_paused_server_answers_nothing_until_resumed() {
        let server = TestingMariaDb::start().expect("mariadbd starts");
        server.pause().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(server.root_sql("SELECT 1").is_ok()));
            assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
            server.resume().unwrap();
        });
        assert!(rx.recv().unwrap(), "it answers once resumed");
    }
}
