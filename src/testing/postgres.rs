//! [`TestingPostgres`]: a real PostgreSQL server on a free loopback port, for the PostgreSQL
//! backend's tests, examples and benchmarks.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
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

/// The superuser the cluster is created with; it logs in with a password over TCP.
const USER: &str = "zklock";

/// One PostgreSQL server (Debian's `postgresql` package: `initdb` and `postgres` from
/// `/usr/lib/postgresql/VERSION/bin`, the highest version found, or the directory named by
/// `PG_BINDIR`) on `127.0.0.1` and a free port, with a fresh cluster in a temporary directory.
///
/// The cluster's superuser `zklock` has a random password and TCP connections must give it
/// (`scram-sha-256`), so tests run with password authentication as services do. When the test
/// runs as root the server runs as the unprivileged `postgres` user (PostgreSQL refuses root):
/// the directory is handed to that user and the server is started with its uid.
///
/// [`stop`](Self::stop) is a fast shutdown (SIGINT), [`restart`](Self::restart) stops and
/// starts it on the same port and data, [`kill`](Self::kill) is `kill -9` of the postmaster and
/// every backend, [`pause`](Self::pause) / [`resume`](Self::resume) are SIGSTOP / SIGCONT of
/// all of them, [`terminate_backend`](Self::terminate_backend) is `pg_terminate_backend`.
/// [`start_standby`](Self::start_standby) makes a streaming standby of a server
/// (`pg_basebackup -R`), asynchronous or synchronous, and [`promote`](Self::promote) turns a
/// standby into a primary (`pg_ctl promote`): a failover.
/// Durability settings are relaxed for speed (`fsync=off`): a killed server loses nothing,
/// only a crash of the machine would.
///
/// Dropping it kills the server and removes the directory; the postmaster also gets SIGKILL
/// from the kernel if the test process dies (a parent-death signal, as for the ZooKeeper
/// servers), and its backends end when the postmaster is gone. Every process of the server
/// carries `zklock-pg-PORT` in its title, and the directory's name starts with `zklock-pg-`.
///
/// # Example
/// ```no_run
/// let server = zklock::testing::TestingPostgres::start()?;
/// println!("PostgreSQL at {}", server.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingPostgres {
    // Declared first so that the server dies before its directory is removed.
    child: Option<Child>,
    paused: Mutex<Vec<u32>>,
    port: u16,
    password: String,
    bindir: PathBuf,
    /// (uid, gid) to run as, when we are root.
    run_as: Option<(u32, u32)>,
    /// The certificates of a server with TLS on (in `dir/tls`).
    tls: Option<super::TestingTls>,
    dir: tempfile::TempDir,
}

impl TestingPostgres {
    /// Creates a cluster (`initdb`) and starts a server on it.
    ///
    /// # Errors
    /// `NotFound` with what to install when there is no PostgreSQL; the server's log when it
    /// does not accept connections within 60 s.
    pub fn start() -> io::Result<TestingPostgres> {
        TestingPostgres::create(false)
    }

    /// As [`start`](Self::start), with TLS on beside the clear connections (`ssl = on`), the
    /// server's certificate for `localhost` and `127.0.0.1` signed by a throwaway CA made with
    /// the `openssl` command ([`tls`](Self::tls)). Connect with `sslmode=verify-full` and that
    /// CA.
    ///
    /// # Errors
    /// As [`start`](Self::start); when `openssl` does not run.
    pub fn start_tls() -> io::Result<TestingPostgres> {
        TestingPostgres::create(true)
    }

    /// The TLS certificates, for a server from [`start_tls`](Self::start_tls).
    pub fn tls(&self) -> Option<&super::TestingTls> {
        self.tls.as_ref()
    }

    fn create(tls: bool) -> io::Result<TestingPostgres> {
        let bindir = bindir()?;
        let run_as = if rustix::process::getuid().is_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        let dir = tempfile::Builder::new().prefix("zklock-pg-").tempdir()?;
        let password = format!("pw{:016x}", fastrand::u64(..));
        let pwfile = dir.path().join("password");
        fs::write(&pwfile, &password)?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid))?;
        }
        let mut initdb = Command::new(bindir.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["-E", "UTF8", "--no-locale", "--no-sync"])
            .current_dir(dir.path());
        let ran = run_tool(&mut initdb, run_as, "initdb");
        let _ = fs::remove_file(&pwfile);
        ran?;
        let tls = if tls {
            let (certificates, path) = super::tls::certificates(dir.path(), false)?;
            if let Some((uid, gid)) = run_as {
                for f in std::iter::once(path.clone())
                    .chain(fs::read_dir(&path)?.flatten().map(|e| e.path()))
                {
                    std::os::unix::fs::chown(&f, Some(uid), Some(gid))?;
                }
            }
            // The server refuses a key others can read.
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(path.join("server.key"), fs::Permissions::from_mode(0o600))?;
            Some(certificates)
        } else {
            None
        };
        let mut server = TestingPostgres {
            child: None,
            paused: Mutex::new(Vec::new()),
            port: 0,
            password,
            bindir,
            run_as,
            tls,
            dir,
        };
        server.launch_on_a_free_port()?;
        Ok(server)
    }

    fn launch_on_a_free_port(&mut self) -> io::Result<()> {
        let mut last = None;
        for _ in 0..5 {
            self.port = free_ports(1)?[0];
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(e) if self.log().contains("already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
    }

    /// A streaming standby of this server: a copy of its cluster made with `pg_basebackup -R
    /// -X stream` (which writes the standby's `primary_conninfo` and `standby.signal`),
    /// started on a free port of its own, returned once the primary reports it streaming. Its
    /// WAL receiver names itself by the standby's `cluster_name`, `zklock-pg-PORT`.
    ///
    /// With `synchronous`, the primary's `synchronous_standby_names` names the standby (set
    /// with `ALTER SYSTEM` and a reload), so that every commit on the primary waits until the
    /// standby has flushed it; else replication is asynchronous (PostgreSQL's default) and a
    /// commit acknowledged by the primary may not have reached the standby yet. The standby
    /// has the same superuser and password; it answers reads, and refuses writes until
    /// [`promote`](Self::promote)d.
    ///
    /// # Errors
    /// When `pg_basebackup` fails, the standby does not start, or the primary does not report
    /// it streaming (and, with `synchronous`, synchronous) within 60 s.
    pub fn start_standby(&self, synchronous: bool) -> io::Result<TestingPostgres> {
        let dir = tempfile::Builder::new().prefix("zklock-pg-").tempdir()?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let mut backup = Command::new(self.bindir.join("pg_basebackup"));
        backup
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .env("PGPASSWORD", &self.password)
            .env_remove("PGPASSFILE")
            .current_dir(dir.path());
        run_tool(&mut backup, self.run_as, "pg_basebackup")?;
        let mut standby = TestingPostgres {
            child: None,
            paused: Mutex::new(Vec::new()),
            port: 0,
            password: self.password.clone(),
            bindir: self.bindir.clone(),
            run_as: self.run_as,
            tls: None,
            dir,
        };
        standby.launch_on_a_free_port()?;
        let name = format!("zklock-pg-{}", standby.port);
        if synchronous {
            self.sql(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'"
            ))?;
            self.sql("SELECT pg_reload_conf()")?;
        }
        let want = if synchronous { "sync" } else { "async" };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let rows = self.sql(&format!(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = {}",
                quote(&name)
            ))?;
            let row: Vec<Option<String>> = rows.into_iter().next().unwrap_or_default();
            if row.first().cloned().flatten().as_deref() == Some("streaming")
                && row.get(1).cloned().flatten().as_deref() == Some(want)
            {
                return Ok(standby);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the standby was not streaming ({want}) within 60 s ({row:?}); \
                         its log:\n{}",
                        standby.log_tail()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes this standby to a primary (`pg_ctl promote -w`): it stops replaying, starts a
    /// new timeline and accepts writes when this returns.
    ///
    /// # Errors
    /// When `pg_ctl` fails or the server still refuses writes 60 s later.
    pub fn promote(&self) -> io::Result<()> {
        let mut promote = Command::new(self.bindir.join("pg_ctl"));
        promote
            .args(["promote", "-w", "-t", "60", "-D"])
            .arg(self.dir.path().join("data"))
            .current_dir(self.dir.path());
        run_tool(&mut promote, self.run_as, "pg_ctl promote")?;
        let deadline = Instant::now() + START_TIMEOUT;
        while self.in_recovery()? {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the promoted standby still refused writes after 60 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Whether the server is a standby (`pg_is_in_recovery()`).
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn in_recovery(&self) -> io::Result<bool> {
        Ok(first(&self.sql("SELECT pg_is_in_recovery()")?).as_deref() == Some("t"))
    }

    fn launch(&mut self) -> io::Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())?;
        let mut cmd = Command::new(self.bindir.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            // A title on every process that the test suite's leftover check can find.
            .arg("-c")
            .arg(format!("cluster_name=zklock-pg-{}", self.port))
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=300", "-c", "shared_buffers=16MB"])
            // A standby whose primary is gone retries every 5 s by default, and may notice a
            // promotion only at the next retry.
            .args(["-c", "wal_retrieve_retry_interval=100ms"])
            .args([
                "-c",
                "logging_collector=off",
                "-c",
                "log_min_messages=warning",
            ])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if self.tls.is_some() {
            let file = |name: &str| format!("{}", self.dir.path().join("tls").join(name).display());
            cmd.args(["-c", "ssl=on", "-c"])
                .arg(format!("ssl_cert_file={}", file("server.pem")))
                .arg("-c")
                .arg(format!("ssl_key_file={}", file("server.key")))
                .arg("-c")
                .arg(format!("ssl_ca_file={}", file("ca.pem")));
        }
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        self.child = Some(spawn(cmd)?);
        self.wait_answering(
            START_TIMEOUT,
            Duration::from_millis(20),
            "did not accept connections",
        )
    }

    /// `postgres://zklock:PASSWORD@127.0.0.1:PORT/postgres`: the superuser, with its password.
    pub fn url(&self) -> String {
        self.url_as(USER, &self.password, "postgres")
    }

    /// A URL for another user, password or database on this server.
    pub fn url_as(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The URL of this server and `standby` (a standby of it, from
    /// [`start_standby`](Self::start_standby)) as one service: the first of the two that
    /// accepts writes (`target_session_attrs=read-write`), so a Client follows a promotion.
    pub fn url_with_standby(&self, standby: &TestingPostgres) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.password, self.port, standby.port
        )
    }

    /// The (uid, gid) its processes run as: the `postgres` user's when the test runs as root.
    pub(super) fn run_as(&self) -> Option<(u32, u32)> {
        self.run_as
    }

    /// The superuser's name, `zklock`.
    pub fn user(&self) -> &str {
        USER
    }

    /// The superuser's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's directory (`data/` and `postgres.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Stops the server with a fast shutdown (SIGINT: sessions are ended, their locks freed)
    /// and waits for it.
    ///
    /// # Errors
    /// When the server does not exit within 60 s (it is then killed).
    pub fn stop(&mut self) -> io::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        self.resume_all();
        let _ = signal(pid, Signal::INT);
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

    /// Kills the postmaster and every backend with SIGKILL and waits until they are gone.
    /// [`restart`](Self::restart) then recovers the cluster from its WAL.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn kill(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let children = children_of(child.id());
        let killed = signal(child.id(), Signal::KILL);
        for &c in &children {
            let _ = signal(c, Signal::KILL);
        }
        let _ = child.wait();
        self.paused.lock().clear();
        let deadline = Instant::now() + START_TIMEOUT;
        while children
            .iter()
            .any(|c| Path::new(&format!("/proc/{c}")).exists() && !is_zombie(*c))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        killed
    }

    /// Stops the postmaster and every backend with SIGSTOP (connections are accepted by the
    /// kernel, nothing answers) and waits until they have stopped.
    ///
    /// # Errors
    /// When the server is not running.
    pub fn pause(&self) -> io::Result<()> {
        let pid = self.pid().ok_or_else(not_running)?;
        let mut all = vec![pid];
        all.extend(children_of(pid));
        for &p in &all {
            let _ = signal(p, Signal::STOP);
        }
        for &p in &all {
            while !all_threads_stopped(p) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.paused.lock().extend(all);
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
        for p in self.paused.lock().drain(..) {
            let _ = signal(p, Signal::CONT);
        }
    }

    /// Ends the session of backend `pid` with `pg_terminate_backend`; whether there was one.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn terminate_backend(&self, pid: i32) -> io::Result<bool> {
        let rows = self.sql(&format!("SELECT pg_terminate_backend({pid})"))?;
        Ok(first(&rows).as_deref() == Some("t"))
    }

    /// The backends that hold (first) and that wait for (second, in no particular order) the
    /// session-level advisory lock whose key is `hashtextextended(name, 0)`, from `pg_locks`.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn advisory_lock(&self, name: &str) -> io::Result<(Vec<i32>, Vec<i32>)> {
        let rows = self.sql(&format!(
            "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended({}, 0)",
            quote(name)
        ))?;
        let (mut held, mut waiting) = (Vec::new(), Vec::new());
        for row in rows {
            let pid = row
                .first()
                .cloned()
                .flatten()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            match row.get(1).cloned().flatten().as_deref() {
                Some("t") => held.push(pid),
                _ => waiting.push(pid),
            }
        }
        Ok((held, waiting))
    }

    /// Runs `sql` (one or more statements, simple protocol) as the superuser on a fresh
    /// connection and returns the rows of its results as text (`None` for NULL).
    ///
    /// # Errors
    /// When the server cannot be reached within 5 s, does not answer within 30 s, or
    /// answers with an error (its message).
    pub fn sql(&self, sql: &str) -> io::Result<Vec<Vec<Option<String>>>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user(USER)
            .password(&self.password)
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(5));
        runtime.block_on(async {
            let (client, connection) = tokio::time::timeout(
                Duration::from_secs(5),
                config.connect(tokio_postgres::NoTls),
            )
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"))?
            .map_err(io::Error::other)?;
            tokio::spawn(connection);
            let answer = tokio::time::timeout(Duration::from_secs(30), client.simple_query(sql))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer within 30 s"))?
                .map_err(|e| {
                    io::Error::other(
                        e.as_db_error()
                            .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
                    )
                })?;
            Ok(answer
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
    }
}

impl ServerChild for TestingPostgres {
    const PROGRAM: &'static str = "postgres";

    fn child(&mut self) -> &mut Option<Child> {
        &mut self.child
    }

    fn answers(&self) -> bool {
        self.sql("SELECT 1").is_ok()
    }

    fn kill_server(&mut self) -> io::Result<()> {
        self.kill()
    }

    fn log_path(&self) -> PathBuf {
        self.log_file()
    }
}

/// The first column of the first row.
fn first(rows: &[Vec<Option<String>>]) -> Option<String> {
    rows.first()?.first()?.clone()
}

/// `s` as an SQL string literal (standard-conforming strings).
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `PG_BINDIR`, else the highest version under `/usr/lib/postgresql`.
fn bindir() -> io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no PostgreSQL server in /usr/lib/postgresql: install Debian's postgresql package \
             (apt-get install postgresql, or scripts/ensure-postgres.sh) or set PG_BINDIR",
        )
    })
}

/// The uid and gid of the `postgres` user, from `/etc/passwd`.
fn postgres_user() -> io::Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "running as root, and there is no `postgres` user to run PostgreSQL as \
                 (PostgreSQL refuses root): install Debian's postgresql package",
            )
        })
}

/// The pids whose parent is `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat_field(p, 1).and_then(|s| s.parse::<u32>().ok()) == Some(pid))
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    stat_field(pid, 0).as_deref() == Some("Z")
}

/// Field `n` after the command name in `/proc/PID/stat` (0: the state, 1: the parent).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n).map(str::to_owned)
}

fn not_running() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the server is not running")
}

impl Drop for TestingPostgres {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

impl std::fmt::Debug for TestingPostgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingPostgres")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// Runs one of PostgreSQL's tools to its end as `run_as` (the `postgres` user when root runs
/// the tests).
fn run_tool(cmd: &mut Command, run_as: Option<(u32, u32)>, what: &str) -> io::Result<()> {
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    super::process::run_to_end(cmd, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_keeps_data_across_restart_and_kill_and_is_gone_when_dropped() {
        let mut server = TestingPostgres::start().expect("postgres starts");
        server
            .sql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
            .unwrap();
        server.restart().unwrap();
        assert_eq!(first(&server.sql("SELECT v FROM t").unwrap()).unwrap(), "7");
        server.kill().unwrap();
        server.restart().unwrap();
        assert_eq!(first(&server.sql("SELECT v FROM t").unwrap()).unwrap(), "7");
        let pid = server.pid().unwrap();
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert!(!dir.exists());
    }

    #[test]
    fn a_standby_streams_the_primary_s_writes_and_accepts_writes_once_promoted() {
        let primary = TestingPostgres::start().expect("postgres starts");
        primary.sql("CREATE TABLE t (v int)").unwrap();
        let standby = primary.start_standby(false).expect("a standby starts");
        assert!(standby.in_recovery().unwrap() && !primary.in_recovery().unwrap());
        primary.sql("INSERT INTO t VALUES (7)").unwrap();
        let deadline = Instant::now() + START_TIMEOUT;
        while first(&standby.sql("SELECT count(*) FROM t").unwrap()).as_deref() != Some("1") {
            assert!(
                Instant::now() < deadline,
                "the insert never reached the standby"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(standby.sql("INSERT INTO t VALUES (8)").is_err());
        drop(primary);
        standby.promote().unwrap();
        standby.sql("INSERT INTO t VALUES (8)").unwrap();
        assert_eq!(
            first(&standby.sql("SELECT sum(v) FROM t").unwrap()).as_deref(),
            Some("15")
        );
    }

    #[test]
    fn a_synchronous_standby_is_reported_sync() {
        let primary = TestingPostgres::start().expect("postgres starts");
        let standby = primary.start_standby(true).expect("a standby starts");
        // A commit waits for the standby (here until it has applied it, not only flushed it,
        // so that a read there sees it): it is there as soon as the primary answers.
        primary
            .sql(
                "SET synchronous_commit = remote_apply; CREATE TABLE t (v int); \
                 INSERT INTO t VALUES (1)",
            )
            .unwrap();
        assert_eq!(
            first(&standby.sql("SELECT count(*) FROM t").unwrap()).as_deref(),
            Some("1")
        );
    }

    #[test]
    fn a_paused_server_answers_nothing_until_resumed() {
        let server = TestingPostgres::start().expect("postgres starts");
        server.pause().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(server.sql("SELECT 1").is_ok()));
            assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
            server.resume().unwrap();
        });
        assert!(rx.recv().unwrap(), "it answers once resumed");
    }

    #[test]
    fn a_terminated_backend_frees_its_advisory_lock() {
        let server = TestingPostgres::start().expect("postgres starts");
        assert!(server.advisory_lock("it's").unwrap().0.is_empty());
        // A session that holds the lock, in the background.
        let url = server.url();
        let mut holder = Command::new("psql")
            .args([&url, "-tA", "-c"])
            .arg("SELECT pg_advisory_lock(hashtextextended('it''s', 0)); SELECT pg_sleep(600)")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql (Debian's postgresql-client) runs");
        let deadline = Instant::now() + START_TIMEOUT;
        let pid = loop {
            if let Some(&pid) = server.advisory_lock("it's").unwrap().0.first() {
                break pid;
            }
            assert!(Instant::now() < deadline, "psql never took the lock");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(server.terminate_backend(pid).unwrap());
        let _ = holder.wait();
        assert!(server.advisory_lock("it's").unwrap().0.is_empty());
    }
}
