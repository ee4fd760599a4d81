//! [`TestingRedis`]: a real `redis-server` on a free loopback port, for the Redis backend's
//! tests, examples and benchmarks.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::clock::{ClockOffset, SteppedClock};
use super::config::free_ports;
use super::lifecycle::ServerChild;
use super::process::{all_threads_stopped, signal, spawn};

/// How long a server may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One `redis-server` (Debian's `redis-server` package, or the program named by
/// `REDIS_SERVER`) on `127.0.0.1` and a free port, with a temporary directory of its own.
///
/// It is started with no persistence unless asked ([`start_persistent`](Self::start_persistent):
/// an append-only file fsynced every write), so that [`restart`](Self::restart) of a default
/// server comes back empty — a restart without persistence, the case where a Redis lock can
/// be granted twice. [`kill`](Self::kill) is `kill -9`; [`pause`](Self::pause) /
/// [`resume`](Self::resume) are SIGSTOP / SIGCONT. [`replica_of`](Self::replica_of) starts a
/// replica that [`promote`](Self::promote) turns into a primary (`REPLICAOF NO ONE`).
/// [`start_with_stepped_clock`](Self::start_with_stepped_clock) starts one whose wall clock
/// the test steps ([`set_clock_ahead`](Self::set_clock_ahead),
/// [`set_clock_behind`](Self::set_clock_behind)) while the machine's stays as it is.
///
/// Dropping it kills the server; the server also gets SIGKILL from the kernel if the test
/// process dies (it is started with a parent-death signal, as the ZooKeeper servers are).
///
/// # Example
/// ```no_run
/// let server = zklock::testing::TestingRedis::start()?;
/// println!("Redis at {}", server.url());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingRedis {
    // Declared first so that the server dies before its directory is removed.
    child: Option<Child>,
    port: u16,
    persistent: bool,
    replica_of: Option<u16>,
    /// A TLS port beside the plain one, and its certificates.
    tls: Option<TlsPort>,
    /// The wall clock the test steps, if asked for.
    clock: Option<SteppedClock>,
    /// A cluster node: its cluster bus port (the second free port, as `--cluster-port`: the
    /// default, port + 10000, may be past 65535 or taken).
    cluster: Option<u16>,
    dir: tempfile::TempDir,
}

/// A TLS port of a [`TestingRedis`], and the certificates it serves with.
struct TlsPort {
    certificates: super::TestingTls,
    port: u16,
    /// Where the PEM files are: the server's `dir/tls`, or a set's shared directory.
    files: PathBuf,
    /// A node of a Sentinel set or a cluster: replication (and the cluster bus) over TLS too,
    /// with the client certificate for the connections it opens.
    set: bool,
}

/// The TLS a new [`TestingRedis`] listens with.
pub(super) enum TlsChoice {
    /// Certificates of its own; whether a client certificate is required, and the names the
    /// server's certificate gives.
    Own(bool, Vec<String>),
    /// A set's certificates (made by [`super::tls::certificates`] in the given directory),
    /// with replication and the cluster bus over TLS.
    Shared(super::TestingTls, PathBuf),
}

impl TestingRedis {
    /// Starts a server without persistence.
    ///
    /// # Errors
    /// `NotFound` with what to install when there is no `redis-server`; the server's log when
    /// it does not answer within 30 s.
    pub fn start() -> io::Result<TestingRedis> {
        Self::launch_new(false, None, None, None, false)
    }

    /// Starts a server without persistence whose wall clock — what `TIME` answers and what
    /// key expiry is measured on — the test sets ahead of or behind the host's with
    /// [`set_clock_ahead`](Self::set_clock_ahead) and [`set_clock_behind`](Self::set_clock_behind),
    /// as an NTP step, an operator's `date -s` or a VM restored from a snapshot would; the
    /// machine's clock is not touched. Its monotonic clock runs on untouched, as it does
    /// through a real step.
    ///
    /// The server runs with a small library preloaded (`LD_PRELOAD`) that adds the offset to
    /// every reading of the wall clock; it is built with the system's C compiler (`CC`, else
    /// `cc`) in the server's directory. (libfaketime cannot start Debian's `redis-server`: it
    /// clashes with the server's allocator, jemalloc.) Linux only.
    ///
    /// # Errors
    /// As [`start`](Self::start); when the C compiler cannot be run or fails (its message).
    pub fn start_with_stepped_clock() -> io::Result<TestingRedis> {
        Self::launch_new(
            false,
            None,
            None,
            Some(ClockOffset::Ahead(Duration::ZERO)),
            false,
        )
    }

    /// The server's wall clock reads the host's plus `by` from its next reading on (`ZERO`:
    /// the host's again). The step is from wherever it was, not from the host's clock.
    ///
    /// # Errors
    /// `Unsupported` for a server not started with
    /// [`start_with_stepped_clock`](Self::start_with_stepped_clock); when the offset file
    /// cannot be written.
    pub fn set_clock_ahead(&self, by: Duration) -> io::Result<()> {
        self.stepped_clock()?.set(ClockOffset::Ahead(by).micros())
    }

    /// The server's wall clock reads the host's minus `by` from its next reading on.
    ///
    /// # Errors
    /// As [`set_clock_ahead`](Self::set_clock_ahead).
    pub fn set_clock_behind(&self, by: Duration) -> io::Result<()> {
        self.stepped_clock()?.set(ClockOffset::Behind(by).micros())
    }

    fn stepped_clock(&self) -> io::Result<&SteppedClock> {
        self.clock.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the server's clock can be stepped only when it was started with \
                 TestingRedis::start_with_stepped_clock",
            )
        })
    }

    /// Starts a server without persistence that also listens for TLS on a second port
    /// ([`tls_url`](Self::tls_url)), with a throwaway CA and certificates made with the
    /// `openssl` command ([`tls`](Self::tls)); with `require_client_certificate` a TLS client
    /// must present the client certificate. The plain port stays open for
    /// [`command`](Self::command).
    ///
    /// # Errors
    /// As [`start`](Self::start); when `openssl` does not run.
    pub fn start_tls(require_client_certificate: bool) -> io::Result<TestingRedis> {
        Self::start_tls_naming(require_client_certificate, &super::tls::SERVER_NAMES)
    }

    /// As [`start_tls`](Self::start_tls), the server's certificate (of the same CA) naming
    /// `names` — DNS names or IP addresses — instead of `localhost` and `127.0.0.1`. With a
    /// name that is not the host the client dials (`start_tls_naming(false,
    /// &["elsewhere.invalid"])`, dialed at [`tls_url`](Self::tls_url)'s `localhost`), a client
    /// that trusts the CA is refused for the name alone.
    ///
    /// # Example
    /// ```no_run
    /// let server = zklock::testing::TestingRedis::start_tls_naming(false, &["elsewhere.invalid"])?;
    /// let ca = server.tls().unwrap().ca_pem();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`start_tls`](Self::start_tls).
    pub fn start_tls_naming(
        require_client_certificate: bool,
        names: &[&str],
    ) -> io::Result<TestingRedis> {
        let names = names.iter().map(|n| (*n).to_owned()).collect();
        Self::launch_new(
            false,
            None,
            Some(TlsChoice::Own(require_client_certificate, names)),
            None,
            false,
        )
    }

    /// Starts a server that writes every change to an append-only file and fsyncs it, so that
    /// [`restart`](Self::restart) keeps every key.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_persistent() -> io::Result<TestingRedis> {
        Self::launch_new(true, None, None, None, false)
    }

    /// Starts a node of a Redis Cluster (`cluster-enabled yes`, node timeout 1 s), alone: no
    /// slot, no peer ([`super::TestingRedisCluster`] makes the cluster).
    pub(super) fn start_cluster_node(
        persistent: bool,
        tls: Option<TlsChoice>,
    ) -> io::Result<TestingRedis> {
        Self::launch_new(persistent, None, tls, None, true)
    }

    /// Starts a node of a TLS Sentinel set with the set's certificates: the first primary
    /// (`replica_of` `None`) or a replica of `replica_of`'s TLS port, replicating over TLS.
    /// A replica is waited for until it has synced, as [`replica_of`](Self::replica_of).
    pub(super) fn start_tls_set_node(
        shared: (&super::TestingTls, &Path),
        replica_of: Option<&TestingRedis>,
    ) -> io::Result<TestingRedis> {
        let tls = TlsChoice::Shared(shared.0.clone(), shared.1.to_owned());
        let Some(primary) = replica_of else {
            return Self::launch_new(false, None, Some(tls), None, false);
        };
        let port = primary.tls_port().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the primary has no TLS port")
        })?;
        let replica = Self::launch_new(false, Some(port), Some(tls), None, false)?;
        replica.wait_synced()?;
        Ok(replica)
    }

    /// The cluster bus port of a node from [`start_cluster_node`](Self::start_cluster_node).
    pub(super) fn cluster_port(&self) -> Option<u16> {
        self.cluster
    }

    /// Starts a replica of `primary` (without persistence) and waits until it has synced.
    ///
    /// # Errors
    /// As [`start`](Self::start); `TimedOut` if the replica does not sync within 30 s.
    pub fn replica_of(primary: &TestingRedis) -> io::Result<TestingRedis> {
        Self::replica_with_clock(primary, None)
    }

    /// As [`replica_of`](Self::replica_of); with an `offset`, the replica's wall clock reads
    /// that far from the host's from its start (and can be stepped later, as
    /// [`start_with_stepped_clock`](Self::start_with_stepped_clock)'s can).
    pub(super) fn replica_with_clock(
        primary: &TestingRedis,
        offset: Option<ClockOffset>,
    ) -> io::Result<TestingRedis> {
        let replica = Self::launch_new(false, Some(primary.port), None, offset, false)?;
        replica.wait_synced()?;
        Ok(replica)
    }

    /// Waits until this replica has synced with its primary (30 s).
    fn wait_synced(&self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !self
            .command(&["INFO", "replication"])?
            .contains("master_link_status:up")
        {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the replica did not sync with its primary within 30 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn launch_new(
        persistent: bool,
        replica_of: Option<u16>,
        tls: Option<TlsChoice>,
        stepped_clock: Option<ClockOffset>,
        cluster: bool,
    ) -> io::Result<TestingRedis> {
        let program = program();
        if Command::new(&program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "cannot run {}: install Debian's redis-server package \
                     (apt-get install redis-server) or set REDIS_SERVER",
                    program.display()
                ),
            ));
        }
        let mut last = None;
        for _ in 0..5 {
            // The plain port, the TLS port, the cluster bus port.
            let ports = free_ports(3)?;
            let dir = tempfile::Builder::new().prefix("zklock-redis-").tempdir()?;
            let tls = match &tls {
                Some(TlsChoice::Own(need, names)) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    let (certificates, files) =
                        super::tls::certificates_naming(dir.path(), *need, &names)?;
                    Some(TlsPort {
                        certificates,
                        port: ports[1],
                        files,
                        set: false,
                    })
                }
                Some(TlsChoice::Shared(certificates, files)) => Some(TlsPort {
                    certificates: certificates.clone(),
                    port: ports[1],
                    files: files.clone(),
                    set: true,
                }),
                None => None,
            };
            let clock = match stepped_clock {
                Some(offset) => {
                    let clock = SteppedClock::build(dir.path())?;
                    clock.set(offset.micros())?;
                    Some(clock)
                }
                None => None,
            };
            let mut server = TestingRedis {
                child: None,
                port: ports[0],
                persistent,
                replica_of,
                tls,
                clock,
                cluster: cluster.then_some(ports[2]),
                dir,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) if server.log().contains("Address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
    }

    fn launch(&mut self) -> io::Result<()> {
        let mut cmd = Command::new(program());
        // A cluster node also listens on `::1`, where the loopback has it (`-`: skipped if
        // not), so that a cluster can announce itself there (`cluster-announce-ip ::1`).
        let bind: &[&str] = match self.cluster {
            Some(_) => &["--bind", "127.0.0.1", "-::1"],
            None => &["--bind", "127.0.0.1"],
        };
        cmd.current_dir(self.dir.path())
            .args(bind)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--dir"])
            .arg(self.dir.path())
            .args(["--logfile", "redis.log", "--daemonize", "no", "--save", ""])
            .args(["--protected-mode", "no", "--enable-debug-command", "local"])
            // A title the test suite's leftover check can find (`zklock-redis-PORT`).
            .args(["--proc-title-template", "{title} zklock-redis-{port}"]);
        if self.persistent {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(t) = &self.tls {
            cmd.arg("--tls-port")
                .arg(t.port.to_string())
                .arg("--tls-cert-file")
                .arg(t.files.join("server.pem"))
                .arg("--tls-key-file")
                .arg(t.files.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(t.files.join("ca.pem"))
                .arg("--tls-auth-clients")
                .arg(if t.certificates.requires_client_certificate() {
                    "yes"
                } else {
                    "no"
                });
            if t.set {
                // Replication (and the cluster bus, which always asks the connecting node for
                // a certificate) over TLS: the client certificate for what this node opens.
                cmd.args(["--tls-replication", "yes"])
                    .arg("--tls-client-cert-file")
                    .arg(t.files.join("client.pem"))
                    .arg("--tls-client-key-file")
                    .arg(t.files.join("client.key"));
                if self.cluster.is_some() {
                    cmd.args(["--tls-cluster", "yes"]);
                }
            }
        }
        if let Some(bus) = self.cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", "1000", "--cluster-port"])
            .arg(bus.to_string())
            .args(["--cluster-allow-replica-migration", "no"]);
        }
        if let Some(primary) = self.replica_of {
            cmd.args(["--replicaof", "127.0.0.1"])
                .arg(primary.to_string());
        }
        if let Some(clock) = &self.clock {
            cmd.envs(clock.env());
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(spawn(cmd)?);
        self.wait_answering(START_TIMEOUT, Duration::from_millis(10), "did not answer")
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://localhost:TLS_PORT` for a [`start_tls`](Self::start_tls) server (the
    /// certificate names `localhost` and `127.0.0.1`); `None` for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|t| format!("rediss://localhost:{}", t.port))
    }

    /// The certificates of a [`start_tls`](Self::start_tls) server (or of a node of a TLS
    /// Sentinel set or cluster).
    pub fn tls(&self) -> Option<&super::TestingTls> {
        self.tls.as_ref().map(|t| &t.certificates)
    }

    /// The TLS port of a [`start_tls`](Self::start_tls) server (or of a node of a TLS
    /// Sentinel set or cluster); `None` for a plain one.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|t| t.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's directory (its log, and its append-only file when persistent).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Stops the server cleanly (`SHUTDOWN`, without saving a snapshot) and waits for it.
    ///
    /// # Errors
    /// When the server cannot be reached or does not exit within 30 s (it is then killed).
    pub fn stop(&mut self) -> io::Result<()> {
        if self.child.is_none() {
            return Ok(());
        }
        let _ = self.command(&["SHUTDOWN", "NOSAVE"]);
        self.wait_exited(START_TIMEOUT)
    }

    /// Stops the server and starts it again on the same port and directory: a persistent
    /// server comes back with its keys, a default one empty.
    ///
    /// # Errors
    /// As [`stop`](Self::stop) and [`start`](Self::start).
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.launch()
    }

    /// Kills the server with SIGKILL and reaps it.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn kill(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = signal(child.id(), Signal::CONT);
        let killed = child.kill();
        let _ = child.wait();
        killed
    }

    /// Stops the server with SIGSTOP (it accepts connections in the kernel but answers
    /// nothing) and waits until it has stopped.
    ///
    /// # Errors
    /// When the server is not running.
    pub fn pause(&self) -> io::Result<()> {
        let pid = self.pid().ok_or_else(not_running)?;
        signal(pid, Signal::STOP)?;
        while !all_threads_stopped(pid) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Lets a paused server run again (SIGCONT).
    ///
    /// # Errors
    /// When the server is not running.
    pub fn resume(&self) -> io::Result<()> {
        signal(self.pid().ok_or_else(not_running)?, Signal::CONT)
    }

    /// Makes a replica a primary (`REPLICAOF NO ONE`): whatever its primary wrote after the
    /// replica last synced is not on it.
    ///
    /// # Errors
    /// When the server cannot be reached or refuses.
    pub fn promote(&mut self) -> io::Result<()> {
        self.replica_of = None;
        self.command(&["REPLICAOF", "NO", "ONE"]).map(drop)
    }

    /// Runs one command on a fresh connection and returns its answer as text: a simple or
    /// bulk string as it is, an integer in decimal, an array's elements one per line, nil as
    /// an empty string.
    ///
    /// # Errors
    /// When the server cannot be reached within 5 s, or answers with an error (its message).
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        command_at(self.port, args)
    }

    /// Runs `commands` one after another on one fresh connection (wrap them in `MULTI` …
    /// `EXEC` for a transaction) and returns their answers, each as [`command`](Self::command)
    /// gives it.
    ///
    /// # Errors
    /// As [`command`](Self::command), at the first answer that is an error.
    pub fn commands(&self, commands: &[&[&str]]) -> io::Result<Vec<String>> {
        let mut stream = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(5),
        )?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut request = String::new();
        for args in commands {
            request.push_str(&format!("*{}\r\n", args.len()));
            for arg in *args {
                request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
        }
        stream.write_all(request.as_bytes())?;
        let mut answers = BufReader::new(stream);
        commands.iter().map(|_| read_reply(&mut answers)).collect()
    }
}

impl ServerChild for TestingRedis {
    const PROGRAM: &'static str = "redis-server";

    fn child(&mut self) -> &mut Option<Child> {
        &mut self.child
    }

    fn answers(&self) -> bool {
        self.command(&["PING"]).is_ok_and(|answer| answer == "PONG")
    }

    fn kill_server(&mut self) -> io::Result<()> {
        self.kill()
    }

    fn log_path(&self) -> PathBuf {
        self.log_file()
    }
}

/// One command to the server (or sentinel) on `127.0.0.1:port`, as [`TestingRedis::command`].
pub(super) fn command_at(port: u16, args: &[&str]) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(5),
    )?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    read_reply(&mut BufReader::new(stream))
}

/// `REDIS_SERVER`, else `redis-server` on the `PATH`.
pub(super) fn program() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

fn not_running() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the server is not running")
}

/// One RESP reply, as [`TestingRedis::command`] describes.
fn read_reply(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let count = || {
        rest.parse::<i64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply {line:?}")))
    };
    match kind {
        "+" | ":" => Ok(rest.to_owned()),
        "-" => Err(io::Error::other(rest.to_owned())),
        "$" => {
            let Ok(n) = usize::try_from(count()?) else {
                return Ok(String::new());
            };
            let mut buf = vec![0; n + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n);
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }
        "*" => {
            let n = count()?.max(0);
            let items = (0..n)
                .map(|_| read_reply(r))
                .collect::<io::Result<Vec<_>>>()?;
            Ok(items.join("\n"))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad reply {line:?}"),
        )),
    }
}

impl Drop for TestingRedis {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

impl std::fmt::Debug for TestingRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingRedis")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("persistent", &self.persistent)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_answers_restarts_empty_and_is_gone_when_dropped() {
        let mut server = TestingRedis::start().expect("redis-server starts");
        assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
        assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
        server.restart().unwrap();
        assert_eq!(server.command(&["GET", "k"]).unwrap(), "", "no persistence");
        let pid = server.pid().unwrap();
        drop(server);
        // Dropping kills and reaps it: not even a zombie is left.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_stepped_clock_moves_time_and_key_expiry_but_not_the_host() {
        let server = TestingRedis::start_with_stepped_clock().expect("redis-server starts");
        let secs = |s: &TestingRedis| -> i64 {
            s.command(&["TIME"])
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let host = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64
        };
        assert!((secs(&server) - host()).abs() <= 1);
        server.command(&["SET", "k", "v", "PX", "60000"]).unwrap();
        server.set_clock_ahead(Duration::from_secs(3600)).unwrap();
        assert!((secs(&server) - host() - 3600).abs() <= 1);
        assert_eq!(
            server.command(&["GET", "k"]).unwrap(),
            "",
            "expired an hour early"
        );
        server.set_clock_ahead(Duration::ZERO).unwrap();
        server.command(&["SET", "k", "v", "PX", "60000"]).unwrap();
        server.set_clock_behind(Duration::from_secs(3600)).unwrap();
        assert!((secs(&server) - host() + 3600).abs() <= 1);
        let left: i64 = server.command(&["PTTL", "k"]).unwrap().parse().unwrap();
        assert!(left > 3_600_000, "an hour longer: {left} ms");
        assert!(TestingRedis::start()
            .unwrap()
            .set_clock_ahead(Duration::from_secs(1))
            .is_err());
    }

    #[test]
    fn a_persistent_server_keeps_its_keys_across_a_restart() {
        let mut server = TestingRedis::start_persistent().expect("redis-server starts");
        server.command(&["SET", "k", "v"]).unwrap();
        server.restart().unwrap();
        assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
    }

    #[test]
    fn a_promoted_replica_has_what_it_synced() {
        let primary = TestingRedis::start().unwrap();
        primary.command(&["SET", "k", "v"]).unwrap();
        let mut replica = TestingRedis::replica_of(&primary).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while replica.command(&["GET", "k"]).unwrap() != "v" {
            assert!(Instant::now() < deadline, "the replica never got k");
            std::thread::sleep(Duration::from_millis(10));
        }
        replica.promote().unwrap();
        assert_eq!(replica.command(&["SET", "x", "1"]).unwrap(), "OK");
        assert!(server_error(&primary));
    }

    /// A paused primary still accepts TCP connections but answers nothing.
    fn server_error(primary: &TestingRedis) -> bool {
        primary.pause().unwrap();
        let answered = primary.command(&["PING"]).is_ok();
        primary.resume().unwrap();
        !answered
    }
}
