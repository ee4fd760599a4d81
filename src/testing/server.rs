//! One ZooKeeper JVM ([`Instance`]), the machinery shared with the cluster
//! (finding Java and ZooKeeper, free ports, configuration, the spawner thread,
//! four-letter words, readiness) and the standalone [`TestingServer`].

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::{MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, TICK_TIME};

/// How long a server (or a whole ensemble) may take to come up.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `stop` waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Connect, write and read timeout of a four-letter-word exchange.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many fresh port sets `start` tries when a port was taken meanwhile.
pub(super) const START_ATTEMPTS: usize = 5;
/// Lines of `zookeeper.log` quoted in an error.
const LOG_TAIL_LINES: usize = 20;

/// Debian's ZooKeeper jar; its manifest's Class-Path names its dependencies.
const DEBIAN_ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// slf4j bindings tried, in order, next to the Debian jar (first one found is used).
const SLF4J_BINDINGS: &[&str] = &[
    "/usr/share/java/slf4j-simple.jar",
    "/usr/share/java/slf4j-nop.jar",
];
/// Netty jars that Debian's ZooKeeper manifest does not name but its Netty connection factory
/// needs (TLS servers).
const DEBIAN_NETTY_EXTRA: &[&str] = &[
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// JVM flags: quick start-up, small heap, IPv4 loopback, no admin server,
/// fast container-node reaping, every four-letter word allowed.
const JVM_FLAGS: &[&str] = &[
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dznode.container.checkIntervalMs=500",
    "-Dznode.container.maxPerMinute=100000",
    "-Dzookeeper.4lw.commands.whitelist=*",
    "-Dzookeeper.snapshot.trust.empty=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

// ---------------------------------------------------------------------------
// Finding Java and ZooKeeper
// ---------------------------------------------------------------------------

/// The Java launcher: `$JAVA`, else `$JAVA_HOME/bin/java`, else `java` on PATH;
/// checked once (by running `java -version`) and cached.
pub(super) fn java() -> io::Result<PathBuf> {
    static JAVA: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    JAVA.get_or_init(|| {
        let java = match std::env::var_os("JAVA").filter(|s| !s.is_empty()) {
            Some(java) => PathBuf::from(java),
            None => match std::env::var_os("JAVA_HOME").filter(|s| !s.is_empty()) {
                Some(home) if Path::new(&home).join("bin/java").is_file() => {
                    Path::new(&home).join("bin/java")
                }
                _ => PathBuf::from("java"),
            },
        };
        let status = Command::new(&java)
            .arg("-version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(status) if status.success() => Ok(java),
            Ok(status) => Err(format!("`{} -version` failed ({status})", java.display())),
            Err(e) => Err(format!("cannot run `{}`: {e}", java.display())),
        }
    })
    .clone()
    .map_err(|why| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "zklock::testing needs a Java runtime to run ZooKeeper: {why}; \
                 install one (`apt-get install default-jre-headless zookeeper`) \
                 or point JAVA (the `java` binary) or JAVA_HOME at it"
            ),
        )
    })
}

/// The classpath holding ZooKeeper: `$ZOOKEEPER_CLASSPATH`, else Debian's jar
/// (plus an slf4j binding so that the server's log is not discarded).
pub(super) fn classpath() -> io::Result<String> {
    if let Some(cp) = std::env::var_os("ZOOKEEPER_CLASSPATH").filter(|s| !s.is_empty()) {
        return cp.into_string().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "ZOOKEEPER_CLASSPATH is not valid UTF-8",
            )
        });
    }
    if !Path::new(DEBIAN_ZOOKEEPER_JAR).is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "zklock::testing runs real ZooKeeper servers, but {DEBIAN_ZOOKEEPER_JAR} \
                 does not exist: install Debian's ZooKeeper and a JRE \
                 (`apt-get install zookeeper default-jre-headless`), or set \
                 ZOOKEEPER_CLASSPATH to a Java classpath holding ZooKeeper's jars"
            ),
        ));
    }
    let mut cp = DEBIAN_ZOOKEEPER_JAR.to_owned();
    // The jar's manifest misses Netty jars that the Netty connection factory (TLS) loads.
    for jar in DEBIAN_NETTY_EXTRA {
        if Path::new(jar).is_file() {
            cp.push(':');
            cp.push_str(jar);
        }
    }
    if let Some(binding) = SLF4J_BINDINGS.iter().find(|jar| Path::new(jar).is_file()) {
        cp.push(':');
        cp.push_str(binding);
    }
    Ok(cp)
}

// ---------------------------------------------------------------------------
// Ports and configuration
// ---------------------------------------------------------------------------

/// `n` distinct free loopback ports (all listeners are held until every port
/// is picked, then dropped).
pub(super) fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// A quorum member's view of the ensemble.
pub(super) struct Quorum<'a> {
    /// `(peer port, election port)` of every member, in server-id order (ids from 1).
    pub(super) peers: &'a [(u16, u16)],
    /// This member's id (1-based).
    pub(super) myid: usize,
}

/// Writes `dir/zoo.cfg` (and `dir/data/myid` for a quorum member) and
/// creates `dir/data`.
pub(super) fn write_config(
    dir: &Path,
    client_port: u16,
    quorum: Option<Quorum<'_>>,
) -> io::Result<()> {
    let data = dir.join("data");
    fs::create_dir_all(&data)?;
    let data_str = data
        .to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "temp dir is not UTF-8"))?;
    let tick = TICK_TIME.as_millis();
    let mut cfg = String::new();
    // `write!` to a String cannot fail.
    let _ = write!(
        cfg,
        "# written by zklock::testing\n\
         tickTime={tick}\n\
         initLimit=20\n\
         syncLimit=10\n\
         dataDir={data_str}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         maxClientCnxns=0\n\
         minSessionTimeout={min}\n\
         maxSessionTimeout={max}\n\
         4lw.commands.whitelist=*\n\
         admin.enableServer=false\n\
         reconfigEnabled=false\n\
         forceSync=no\n\
         preAllocSize=1024\n\
         cnxTimeout=1000\n",
        min = MIN_SESSION_TIMEOUT.as_millis(),
        max = MAX_SESSION_TIMEOUT.as_millis(),
    );
    match quorum {
        None => cfg.push_str("standaloneEnabled=true\n"),
        Some(q) => {
            let standalone = q.peers.len() == 1;
            let _ = writeln!(cfg, "standaloneEnabled={standalone}");
            for (i, (peer, election)) in q.peers.iter().enumerate() {
                let _ = writeln!(cfg, "server.{}=127.0.0.1:{peer}:{election}", i + 1);
            }
            fs::write(data.join("myid"), format!("{}\n", q.myid))?;
        }
    }
    fs::write(dir.join("zoo.cfg"), cfg)
}

// ---------------------------------------------------------------------------
// The spawner thread
// ---------------------------------------------------------------------------

struct SpawnRequest {
    cmd: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// Spawns `cmd` on the process-global spawner thread.
///
/// Every JVM gets `PR_SET_PDEATHSIG = SIGKILL`. The kernel delivers it when
/// the *thread* that forked the child exits, so all forks happen on one
/// thread that lives as long as the process: when the test process exits or
/// dies, the kernel kills every JVM it started.
fn spawn(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<Option<mpsc::Sender<SpawnRequest>>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let started = thread::Builder::new()
            .name("zklock-testing-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop never ends.
                for mut req in rx {
                    let _ = req.reply.send(spawn_with_parent_death_signal(&mut req.cmd));
                }
            });
        Mutex::new(started.ok().map(|_| tx))
    });
    let tx = lock(spawner)
        .clone()
        .ok_or_else(|| io::Error::other("cannot start the JVM spawner thread"))?;
    let (reply, result) = mpsc::channel();
    tx.send(SpawnRequest { cmd, reply })
        .map_err(|_| io::Error::other("the JVM spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the JVM spawner thread is gone"))?
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn spawn_with_parent_death_signal(cmd: &mut Command) -> io::Result<Child> {
    use rustix::process::{getppid, set_parent_process_death_signal, Pid, Signal};
    use std::os::unix::process::CommandExt;
    let parent = Pid::from_raw(std::process::id() as i32);
    // SAFETY: the closure runs in the forked child before `exec`; it only makes the
    // async-signal-safe syscalls prctl(2) and getppid(2), touches no lock and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl.
            if getppid() != parent {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        })
    };
    cmd.spawn()
}

#[cfg(not(target_os = "linux"))]
fn spawn_with_parent_death_signal(cmd: &mut Command) -> io::Result<Child> {
    cmd.spawn()
}

/// Sends `sig` to `pid`, which must be one of our own children not yet reaped
/// (so that it cannot have been recycled for another process).
fn signal(pid: u32, sig: rustix::process::Signal) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// Whether every thread of `pid` is in the stopped state (`T` in
/// `/proc/PID/task/TID/stat`). True where `/proc` cannot tell.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            return true;
        };
        // "TID (comm) STATE ...": comm may contain spaces and parentheses.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        matches!(state, None | Some('T' | 't' | 'Z' | 'X'))
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// Four-letter words
// ---------------------------------------------------------------------------

/// Sends the four-letter word `cmd` to `127.0.0.1:port` and reads the answer to
/// EOF, with [`FOUR_LETTER_TIMEOUT`] for the whole exchange.
pub(super) fn four_letter(port: u16, cmd: &str) -> io::Result<String> {
    if cmd.len() != 4 || !cmd.is_ascii() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a four-letter word: {cmd:?}"),
        ));
    }
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("`{cmd}` to 127.0.0.1:{port}: no answer within {FOUR_LETTER_TIMEOUT:?}"),
        )
    };
    let deadline = Instant::now() + FOUR_LETTER_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream =
        TcpStream::connect_timeout(&addr, FOUR_LETTER_TIMEOUT).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
            _ => e,
        })?;
    stream.set_write_timeout(Some(FOUR_LETTER_TIMEOUT))?;
    stream
        .write_all(cmd.as_bytes())
        .map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
            _ => e,
        })?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                return Err(timed_out())
            }
            // A server that closes right after answering may reset the connection.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !answer.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The `Mode:` of a `srvr` answer (`standalone`, `leader`, `follower`, `observer`).
pub(super) fn mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}

// ---------------------------------------------------------------------------
// One ZooKeeper JVM
// ---------------------------------------------------------------------------

/// What [`Instance::poll_ready`] found.
enum Readiness {
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
            let kind = if tail.contains("Address already in use") || tail.contains("BindException")
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
fn configure_sasl(dir: &Path, users: &[(String, String)]) -> io::Result<Vec<String>> {
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

// ---------------------------------------------------------------------------
// TestingServer
// ---------------------------------------------------------------------------

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
        Self::start_with(None, &[])
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
        Self::start_with(Some(require_client_certificate), &[])
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
        Self::start_with(None, &users)
    }

    fn start_with(tls: Option<bool>, sasl_users: &[(String, String)]) -> io::Result<TestingServer> {
        java()?;
        classpath()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::Builder::new().prefix("zklock-zk-").tempdir()?;
            let ports = free_ports(2)?;
            let port = ports[0];
            write_config(dir.path(), port, None)?;
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
