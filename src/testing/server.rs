//! The standalone [`TestingServer`].

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::config::{classpath, free_ports, java, write_config};
use super::instance::{
    configure_sasl, relaunch, wait_serving, Instance, START_ATTEMPTS, START_TIMEOUT,
};

/// A real standalone ZooKeeper server (a JVM) on a free loopback port, with
/// its data in a temporary directory.
///
/// Dropping it kills the JVM (SIGKILL, then reaps it) and removes the
/// directory. See the [module docs](super) for the configuration.
///
/// # Example
///
/// ```no_run
/// use zklock::testing::TestingServer;
///
/// let mut server = TestingServer::start()?;
/// let connect = server.connect_string(); // "127.0.0.1:PORT"
/// assert!(server.four_letter("srvr")?.contains("Mode: standalone"));
///
/// server.pause()?; // SIGSTOP: clients time out, sessions stay alive
/// server.resume()?; // SIGCONT
/// server.restart()?; // same port, same data
/// # let _ = connect;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingServer {
    // Declared first so that the JVM dies before its directory is removed.
    instance: Instance,
    dir: tempfile::TempDir,
    /// The certificates and the secure port of a TLS server.
    tls: Option<(super::TestingTls, u16)>,
}

impl TestingServer {
    /// Starts a server on a free port with a fresh data directory and waits
    /// (up to 60 s) until it serves clients.
    ///
    /// Fails with [`io::ErrorKind::NotFound`] when Java or ZooKeeper is not
    /// installed, and with the tail of the server's log when it does not come up.
    pub fn start() -> io::Result<TestingServer> {
        Self::start_with(None, &[], false)
    }

    /// [`start`](Self::start) with `forceSync=yes`: every transaction is fsynced before it is
    /// acknowledged, as on a production server (the others skip it, so that tests run fast;
    /// a killed JVM loses nothing either way). For benchmarks that count the cost of writes.
    pub fn start_durable() -> io::Result<TestingServer> {
        Self::start_with(None, &[], true)
    }

    /// Starts a server whose clients connect with TLS, on
    /// [`tls_connect_string`](Self::tls_connect_string): ZooKeeper's Netty connection factory
    /// with a `secureClientPort`, and certificates made for the occasion (a CA, the server's,
    /// a client's; see [`TestingTls`](super::TestingTls)) with the `openssl` command. With
    /// `require_client_certificate` the server refuses clients that present no certificate
    /// signed by that CA (`ssl.clientAuth=need`).
    ///
    /// The plain [`connect_string`](Self::connect_string) port stays open, for the
    /// four-letter words with which this module sees that the server serves; give clients
    /// the TLS one.
    pub fn start_tls(require_client_certificate: bool) -> io::Result<TestingServer> {
        Self::start_with(Some(require_client_certificate), &[], false)
    }

    /// Starts a server that requires every client to log in with SASL (`DIGEST-MD5`) as one
    /// of `users` (`(name, password)`): a JAAS `Server` section with ZooKeeper's
    /// `DigestLoginModule`, `SASLAuthenticationProvider`, and `enforce.auth.enabled=true` with
    /// `enforce.auth.schemes=sasl`, so a client that does not log in is refused
    /// (`AuthFailed`).
    pub fn start_sasl(users: &[(&str, &str)]) -> io::Result<TestingServer> {
        if users.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a SASL TestingServer needs at least one user",
            ));
        }
        let users: Vec<(String, String)> = users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
        Self::start_with(None, &users, false)
    }

    fn start_with(
        tls: Option<bool>,
        sasl_users: &[(String, String)],
        force_sync: bool,
    ) -> io::Result<TestingServer> {
        java()?;
        classpath()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::Builder::new().prefix("zklock-zk-").tempdir()?;
            let ports = free_ports(2)?;
            let port = ports[0];
            write_config(dir.path(), port, None, force_sync)?;
            let tls = match tls {
                None => None,
                Some(need) => Some((super::tls::configure(dir.path(), ports[1], need)?, ports[1])),
            };
            let mut instance = Instance::new(dir.path().to_owned(), port);
            if !sasl_users.is_empty() {
                instance = instance.with_jvm_args(configure_sasl(dir.path(), sasl_users)?);
            }
            instance.launch()?;
            match wait_serving(&[&instance], Instant::now() + START_TIMEOUT) {
                Ok(()) => return Ok(TestingServer { instance, dir, tls }),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    tracing::debug!("zklock::testing: port taken, trying another: {e}");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
    }

    /// The connect string of this server: `"127.0.0.1:PORT"`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.instance.port())
    }

    /// The TLS connect string of a [`start_tls`](Self::start_tls) server:
    /// `"tcp+tls://127.0.0.1:PORT"`; `None` for a plain server.
    pub fn tls_connect_string(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|(_, port)| format!("tcp+tls://127.0.0.1:{port}"))
    }

    /// The certificates of a [`start_tls`](Self::start_tls) server.
    pub fn tls(&self) -> Option<&super::TestingTls> {
        self.tls.as_ref().map(|(tls, _)| tls)
    }

    /// The client port (the same across [`restart`](Self::restart)s).
    pub fn port(&self) -> u16 {
        self.instance.port()
    }

    /// The JVM's process id; `None` when the server is not running.
    pub fn pid(&self) -> Option<u32> {
        self.instance.pid()
    }

    /// The server's data directory (kept across restarts, removed on drop).
    pub fn data_dir(&self) -> PathBuf {
        self.instance.data_dir()
    }

    /// The file that receives the JVM's stdout and stderr (its log).
    pub fn log_file(&self) -> PathBuf {
        self.instance.log_file()
    }

    /// The temporary directory holding `zoo.cfg`, `data/` and `zookeeper.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the server gracefully: SIGTERM, then SIGKILL if it has not exited
    /// after a few seconds. Does nothing when it is not running.
    pub fn stop(&mut self) -> io::Result<()> {
        self.instance.stop()
    }

    /// Stops the server if it is running, then starts it again on the same
    /// port and data directory and waits until it serves.
    pub fn restart(&mut self) -> io::Result<()> {
        self.instance.stop()?;
        relaunch(&self.instance)
    }

    /// Kills the server abruptly (SIGKILL) and reaps it, like a crash.
    /// Does nothing when it is not running.
    pub fn kill(&mut self) -> io::Result<()> {
        self.instance.kill()
    }

    /// Freezes the JVM (SIGSTOP): connections stay open but nothing is
    /// answered, so client sessions time out and expire once it resumes.
    pub fn pause(&self) -> io::Result<()> {
        self.instance.pause()
    }

    /// Thaws a [`pause`](Self::pause)d JVM (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.instance.resume()
    }

    /// Sends a four-letter word (`"srvr"`, `"wchc"`, `"wchs"`, `"cons"`,
    /// `"ruok"`, `"mntr"`, ...) and returns the answer. Times out with
    /// [`io::ErrorKind::TimedOut`] after about 2 s (e.g. when paused).
    pub fn four_letter(&self, cmd: &str) -> io::Result<String> {
        self.instance.four_letter(cmd)
    }
}

impl Drop for TestingServer {
    fn drop(&mut self) {
        let _ = self.instance.kill();
    }
}

impl std::fmt::Debug for TestingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingServer")
            .field("port", &self.port())
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}
