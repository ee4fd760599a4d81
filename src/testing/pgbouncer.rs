//! [`TestingPgBouncer`]: a throwaway PgBouncer in front of a [`TestingPostgres`], for the
//! tests of what works through a connection pooler and what does not.

use std::fs;
use std::io;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::config::free_ports;
use super::process::spawn;
use super::TestingPostgres;

/// How long PgBouncer may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// PgBouncer (Debian's `pgbouncer` package: `/usr/sbin/pgbouncer`, or `pgbouncer` on the
/// `PATH`) on `127.0.0.1` and a free port, in front of one [`TestingPostgres`], with a
/// configuration in a temporary directory: the database `postgres`, the server's superuser
/// and password (`auth_type = plain`), the pool mode asked for, a pool of 4 server sessions.
///
/// `pool_mode = transaction` is the mode that breaks session locks (each transaction runs on
/// whichever server session is free) and that transaction-scoped locks
/// ([`PgXactLock`](crate::postgres::PgXactLock)) are made for.
///
/// When the test runs as root PgBouncer runs as the `postgres` user, as the server does
/// (PgBouncer refuses root). Dropping it kills PgBouncer and waits for it; it also gets
/// SIGKILL from the kernel if the test process dies (a parent-death signal, as the servers
/// do), so no PgBouncer outlives its test. Its log is `pgbouncer.log` in its directory.
///
/// # Example
/// ```no_run
/// use zklock::testing::{TestingPgBouncer, TestingPostgres};
///
/// let server = TestingPostgres::start()?;
/// let bouncer = TestingPgBouncer::start(&server, "transaction")?;
/// println!("through PgBouncer: {}", bouncer.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingPgBouncer {
    // Declared first so that PgBouncer dies before its directory is removed.
    child: Child,
    port: u16,
    user: String,
    password: String,
    dir: tempfile::TempDir,
}

impl TestingPgBouncer {
    /// Starts PgBouncer in front of `server` with `pool_mode` (`session`, `transaction` or
    /// `statement`), returned once it accepts connections.
    ///
    /// # Errors
    /// `InvalidInput` for another pool mode; `NotFound` with what to install when there is no
    /// PgBouncer; PgBouncer's log when it exits or does not listen within 30 s.
    pub fn start(server: &TestingPostgres, pool_mode: &str) -> io::Result<TestingPgBouncer> {
        if !matches!(pool_mode, "session" | "transaction" | "statement") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("pool_mode is session, transaction or statement, not {pool_mode:?}"),
            ));
        }
        let program = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("pgbouncer");
        let dir = tempfile::Builder::new()
            .prefix("zklock-pgbouncer-")
            .tempdir()?;
        let port = free_ports(1)?[0];
        let d = dir.path().display();
        let user = server.user().to_owned();
        let users = dir.path().join("users.txt");
        fs::write(&users, format!("\"{user}\" \"{}\"\n", server.password()))?;
        let ini = dir.path().join("pgbouncer.ini");
        fs::write(
            &ini,
            format!(
                "[databases]\npostgres = host=127.0.0.1 port={} dbname=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 auth_type = plain\nauth_file = {d}/users.txt\npool_mode = {pool_mode}\n\
                 unix_socket_dir =\nlogfile = {d}/pgbouncer.log\npidfile = {d}/pgbouncer.pid\n\
                 default_pool_size = 4\n",
                server.port()
            ),
        )?;
        let mut cmd = Command::new(program);
        cmd.arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = server.run_as() {
            for path in [dir.path(), users.as_path(), ini.as_path()] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
            }
            cmd.uid(uid).gid(gid);
        }
        let child = spawn(cmd).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "no pgbouncer: install Debian's pgbouncer package (apt-get install \
                     pgbouncer, or scripts/ensure-postgres.sh)",
                )
            } else {
                e
            }
        })?;
        let mut bouncer = TestingPgBouncer {
            child,
            port,
            user,
            password: server.password().to_owned(),
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = bouncer.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "pgbouncer exited ({status}); its log:\n{}",
                    bouncer.log()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "pgbouncer did not listen within 30 s; its log:\n{}",
                        bouncer.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(bouncer)
    }

    /// `postgres://zklock:PASSWORD@127.0.0.1:PORT/postgres`: the server's superuser, through
    /// PgBouncer.
    pub fn url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/postgres",
            self.user, self.password, self.port
        )
    }

    /// The same as a key-value string, as the `postgres` and `tokio-postgres` crates take it.
    pub fn key_value(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={} password={} dbname=postgres",
            self.port, self.user, self.password
        )
    }

    /// PgBouncer's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// PgBouncer's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for TestingPgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl std::fmt::Debug for TestingPgBouncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingPgBouncer")
            .field("port", &self.port)
            .field("pid", &self.child.id())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}
