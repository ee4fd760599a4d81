//! One ZooKeeper JVM: launch, readiness, stop, kill, pause, and relaunch on the same ports and
//! data; shared by [`TestingServer`](super::TestingServer) and the cluster.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::config::{classpath, java, JVM_FLAGS, MAIN_CLASS};
use super::four_letter::{four_letter, mode};
use super::process::{all_threads_stopped, lock, signal, spawn};

/// How long a server (or a whole ensemble) may take to come up.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `stop` waits after SIGTERM before it sends SIGKILL.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often readiness is polled.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many fresh port sets `start` tries when a port was taken meanwhile.
pub(super) const START_ATTEMPTS: usize = 5;
/// Lines of `zookeeper.log` quoted in an error.
pub(super) const LOG_TAIL_LINES: usize = 20;

/// What [`Instance::poll_ready`] found.
pub(super) enum Readiness {
    Serving,
    NotYet,
    Failed(io::Error),
}

/// One ZooKeeper JVM living in `dir` (`zoo.cfg`, `data/`, `zookeeper.log`),
/// serving clients on `127.0.0.1:port`. Killed when dropped.
pub(super) struct Instance {
    dir: PathBuf,
    port: u16,
    child: Mutex<Option<Child>>,
    /// Length of `zookeeper.log` when the current JVM was launched.
    log_offset: Mutex<u64>,
    /// JVM arguments beyond [`JVM_FLAGS`] (a JAAS configuration, ...).
    jvm_args: Vec<String>,
}

impl Instance {
    /// An instance whose `zoo.cfg` is already written in `dir`; not started.
    pub(super) fn new(dir: PathBuf, port: u16) -> Instance {
        Instance {
            dir,
            port,
            child: Mutex::new(None),
            log_offset: Mutex::new(0),
            jvm_args: Vec::new(),
        }
    }

    /// The same, its JVM started with `args` too.
    pub(super) fn with_jvm_args(mut self, args: Vec<String>) -> Instance {
        self.jvm_args = args;
        self
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    pub(super) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub(super) fn log_file(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    /// Spawns the JVM (which must not be running).
    pub(super) fn launch(&self) -> io::Result<()> {
        let mut child = lock(&self.child);
        if child.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("ZooKeeper on port {} is already running", self.port),
            ));
        }
        let java = java()?;
        let classpath = classpath()?;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())?;
        *lock(&self.log_offset) = log.metadata()?.len();
        writeln!(
            log,
            "==== zklock::testing: starting ZooKeeper on 127.0.0.1:{} ====",
            self.port
        )?;
        let mut cmd = Command::new(java);
        cmd.args(JVM_FLAGS)
            .args(&self.jvm_args)
            .arg("-cp")
            .arg(classpath)
            .arg(MAIN_CLASS)
            .arg(self.dir.join("zoo.cfg"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let spawned = spawn(cmd)?;
        tracing::debug!(
            "zklock::testing: ZooKeeper pid {} on port {}",
            spawned.id(),
            self.port
        );
        *child = Some(spawned);
        Ok(())
    }

    /// The JVM's pid, `None` when it is not running (an exited JVM is reaped here).
    pub(super) fn pid(&self) -> Option<u32> {
        let mut guard = lock(&self.child);
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            _ => {
                *guard = None;
                None
            }
        }
    }

    fn running_pid(&self) -> io::Result<u32> {
        self.pid().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("ZooKeeper on port {} is not running", self.port),
            )
        })
    }

    /// SIGSTOP, then waits until every thread of the JVM has stopped (a
    /// group stop is asynchronous: a busy thread could still answer a request
    /// right after kill(2) returns).
    pub(super) fn pause(&self) -> io::Result<()> {
        let pid = self.running_pid()?;
        signal(pid, rustix::process::Signal::STOP)?;
        let deadline = Instant::now() + STOP_GRACE;
        while !all_threads_stopped(pid) {
            if Instant::now() >= deadline {
                tracing::warn!(
                    "zklock::testing: ZooKeeper pid {pid} has not stopped after SIGSTOP"
                );
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// SIGCONT.
    pub(super) fn resume(&self) -> io::Result<()> {
        signal(self.running_pid()?, rustix::process::Signal::CONT)
    }

    /// SIGCONT + SIGTERM, wait up to [`STOP_GRACE`], then SIGKILL; reaps. A no-op
    /// when not running.
    pub(super) fn stop(&self) -> io::Result<()> {
        let mut guard = lock(&self.child);
        let Some(child) = guard.as_mut() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            let pid = child.id();
            // Holding the lock keeps the child unreaped, so the pid is still ours.
            let _ = signal(pid, rustix::process::Signal::CONT);
            signal(pid, rustix::process::Signal::TERM)?;
            let deadline = Instant::now() + STOP_GRACE;
            while child.try_wait()?.is_none() {
                if Instant::now() >= deadline {
                    tracing::warn!(
                        "zklock::testing: ZooKeeper pid {pid} ignored SIGTERM; killing it"
                    );
                    let _ = child.kill();
                    child.wait()?;
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        *guard = None;
        Ok(())
    }

    /// SIGKILL and reap. A no-op when not running.
    pub(super) fn kill(&self) -> io::Result<()> {
        let mut guard = lock(&self.child);
        if let Some(child) = guard.as_mut() {
            // SIGKILL also ends a stopped (paused) process.
            let _ = child.kill();
            child.wait()?;
        }
        *guard = None;
        Ok(())
    }

    pub(super) fn four_letter(&self, cmd: &str) -> io::Result<String> {
        four_letter(self.port, cmd)
    }

    /// The last [`LOG_TAIL_LINES`] lines the current JVM wrote to its log.
    fn log_tail(&self) -> String {
        let offset = *lock(&self.log_offset);
        let mut text = String::new();
        if let Ok(mut f) = File::open(self.log_file()) {
            use std::io::Seek;
            let _ = f.seek(io::SeekFrom::Start(offset));
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// An error about this instance, quoting the tail of its log.
    fn error(&self, kind: io::ErrorKind, what: &str) -> io::Error {
        io::Error::new(
            kind,
            format!(
                "ZooKeeper on 127.0.0.1:{} {what}; last lines of {}:\n{}",
                self.port,
                self.log_file().display(),
                self.log_tail()
            ),
        )
    }

    /// Serving (our JVM answers `srvr` with a serving mode), not yet, or dead.
    fn poll_ready(&self) -> Readiness {
        let exited = {
            let mut guard = lock(&self.child);
            match guard.as_mut() {
                None => Some("is not running".to_owned()),
                Some(child) => match child.try_wait() {
                    Ok(None) => None,
                    Ok(Some(status)) => {
                        *guard = None;
                        Some(format!("exited during start-up ({status})"))
                    }
                    Err(e) => Some(format!("cannot be waited for: {e}")),
                },
            }
        };
        if let Some(what) = exited {
            let tail = self.log_tail();
            // The bind error itself may have scrolled out of the tail: a member that could
            // not bind its election port says so last ("… after 3 errors. Use
            // zookeeper.electionPortBindRetry …"), and a failed bind of the TLS port ends
            // with the stack of the bind (`ServerSocketChannelImpl.netBind`).
            let kind = if tail.contains("Address already in use")
                || tail.contains("BindException")
                || tail.contains("electionPortBindRetry")
                || tail.contains("netBind")
            {
                io::ErrorKind::AddrInUse
            } else {
                io::ErrorKind::Other
            };
            return Readiness::Failed(self.error(kind, &what));
        }
        let serving = matches!(
            self.four_letter("srvr").as_deref().map(mode),
            Ok(Some("standalone" | "leader" | "follower" | "observer"))
        );
        if !serving {
            return Readiness::NotYet;
        }
        // Make sure the answer came from our JVM, not from someone who took the port.
        let ours = format!("dataDir={}", self.data_dir().display());
        match self.four_letter("conf") {
            Ok(conf) if conf.lines().any(|l| l.trim().starts_with(&ours)) => Readiness::Serving,
            _ => Readiness::NotYet,
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Waits until every instance serves, failing early when one dies (kind
/// `AddrInUse` when it could not bind a port) and with `TimedOut` at `deadline`.
pub(super) fn wait_serving(instances: &[&Instance], deadline: Instant) -> io::Result<()> {
    let mut ready = vec![false; instances.len()];
    loop {
        for (i, instance) in instances.iter().enumerate() {
            if !ready[i] {
                match instance.poll_ready() {
                    Readiness::Serving => ready[i] = true,
                    Readiness::NotYet => {}
                    Readiness::Failed(e) => return Err(e),
                }
            }
        }
        if ready.iter().all(|r| *r) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let i = ready.iter().position(|r| !r).unwrap_or(0);
            return Err(instances[i].error(
                io::ErrorKind::TimedOut,
                &format!("did not come up within {START_TIMEOUT:?}"),
            ));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Relaunches a stopped instance on its own ports and waits until it serves,
/// retrying while a port is still taken.
pub(super) fn relaunch(instance: &Instance) -> io::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        instance.launch()?;
        match wait_serving(&[instance], deadline) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tracing::debug!("zklock::testing: port busy, retrying: {e}");
                let _ = instance.kill();
                thread::sleep(Duration::from_millis(250));
            }
            Err(e) => {
                let _ = instance.kill();
                return Err(e);
            }
            Ok(()) => return Ok(()),
        }
    }
}

/// Writes `dir/jaas.conf` for `users` and appends SASL-required settings to `dir/zoo.cfg`;
/// returns the JVM arguments that point the server at the JAAS file.
pub(super) fn configure_sasl(dir: &Path, users: &[(String, String)]) -> io::Result<Vec<String>> {
    let quote = |s: &str| -> io::Result<String> {
        if s.is_empty()
            || s.chars()
                .any(|c| !(c.is_ascii_alphanumeric() || "-_.@".contains(c)))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("SASL user or password {s:?}: use letters, digits and -_.@ only"),
            ));
        }
        Ok(s.to_owned())
    };
    let mut jaas =
        String::from("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required");
    for (user, password) in users {
        let _ = write!(jaas, "\n  user_{}=\"{}\"", quote(user)?, quote(password)?);
    }
    jaas.push_str(";\n};\n");
    let path = dir.join("jaas.conf");
    fs::write(&path, jaas)?;
    OpenOptions::new()
        .append(true)
        .open(dir.join("zoo.cfg"))?
        .write_all(
            b"# SASL, written by zklock::testing\n\
          authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n\
          enforce.auth.enabled=true\n\
          enforce.auth.schemes=sasl\n",
        )?;
    Ok(vec![format!(
        "-Djava.security.auth.login.config={}",
        path.display()
    )])
}
