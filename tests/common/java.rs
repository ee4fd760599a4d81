//! The Java side of the interop tests (`tests/interop*.rs`): a program of `tests/java` compiled
//! against Apache Curator and run in separate JVMs, and the helpers both languages' contenders
//! share (the shared log, waiting, watches).
//!
//! Needs a JDK and Debian's Curator 5 jars (`INSTALL`); `ZKLOCK_CURATOR_CLASSPATH` replaces the
//! Debian jars; `JAVA_HOME` (or `JAVA` and `JAVAC`) picks the JDK.
#![allow(dead_code)] // each test file uses some of the helpers

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use zklock::testing::TestingServer;

use super::patience;

pub const INSTALL: &str = "apt-get install libcurator-recipes-java default-jdk-headless";

/// Debian's Curator 5 jars and what they need at compile and run time (the jars' manifests name
/// the rest: ZooKeeper's netty, jackson, ...).
pub const DEBIAN_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
];
/// An slf4j binding, if installed, so that Curator's warnings reach the contenders' stderr files.
pub const SLF4J_BINDING: &str = "/usr/share/java/slf4j-simple.jar";

pub const JVM_FLAGS: &[&str] = &[
    "-Xms16m",
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
];

// ---------------------------------------------------------------------------
// The Java side
// ---------------------------------------------------------------------------

/// Which program of `tests/java` a test file runs.
#[derive(Clone, Copy, Debug)]
pub struct JavaProgram {
    /// The class, also the file name: `tests/java/<class>.java`.
    pub class: &'static str,
    /// The Curator recipes it runs, for the message when Curator is missing.
    pub recipes: &'static str,
    /// The prefix of the scratch directory's name.
    pub scratch_prefix: &'static str,
    /// How many of its last stdout lines a failure message quotes (`None`: all).
    pub stdout_tail: Option<usize>,
}

/// `$var`, else `$JAVA_HOME/bin/<tool>`, else `<tool>` on PATH.
pub fn jdk_tool(var: &str, tool: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|s| !s.is_empty()) {
        return p.into();
    }
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|s| !s.is_empty()) {
        let p = Path::new(&home).join("bin").join(tool);
        if p.is_file() {
            return p;
        }
    }
    tool.into()
}

/// A `JavaProgram` compiled into a scratch directory that also holds the shared log and the
/// contenders' stderr.
pub struct Java {
    program: JavaProgram,
    dir: tempfile::TempDir,
    java: PathBuf,
    classpath: String,
}

impl Java {
    /// Compiles `tests/java/<class>.java`; panics naming what to install when the JDK or the
    /// Curator jars are missing.
    pub fn compile(program: &JavaProgram) -> Java {
        let jars = match std::env::var("ZKLOCK_CURATOR_CLASSPATH") {
            Ok(cp) if !cp.is_empty() => cp,
            _ => {
                let missing: Vec<&str> = DEBIAN_JARS
                    .iter()
                    .copied()
                    .filter(|j| !Path::new(j).is_file())
                    .collect();
                assert!(
                    missing.is_empty(),
                    "the interop tests run Apache Curator's {}, but {} missing: install \
                     Curator and a JDK (`{INSTALL}`), or set ZKLOCK_CURATOR_CLASSPATH to a \
                     classpath holding Curator 5 and its dependencies",
                    program.recipes,
                    match missing.len() {
                        1 => format!("{} is", missing[0]),
                        _ => format!("{} are", missing.join(", ")),
                    }
                );
                let mut cp = DEBIAN_JARS.join(":");
                if Path::new(SLF4J_BINDING).is_file() {
                    cp = format!("{cp}:{SLF4J_BINDING}");
                }
                cp
            }
        };
        let javac = jdk_tool("JAVAC", "javac");
        let java = jdk_tool("JAVA", "java");
        for (tool, what) in [(&javac, "javac (a JDK)"), (&java, "java")] {
            let ok = Command::new(tool)
                .arg("-version")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "the interop tests compile and run a Java program, but `{} -version` does \
                 not run: install {what} and Curator (`{INSTALL}`), or set JAVA_HOME",
                tool.display()
            );
        }

        let dir = tempfile::Builder::new()
            .prefix(program.scratch_prefix)
            .tempdir()
            .expect("scratch directory");
        let classes = dir.path().join("classes");
        fs::create_dir(&classes).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/java")
            .join(format!("{}.java", program.class));
        let out = Command::new(&javac)
            .args(["-Xlint:all", "-Xlint:-path", "-cp", &jars, "-d"])
            .arg(&classes)
            .arg(&source)
            .stdin(Stdio::null())
            .output()
            .expect("javac runs");
        assert!(
            out.status.success(),
            "javac {} failed ({}); is Curator installed (`{INSTALL}`)?\n{}{}",
            source.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let classpath = format!("{}:{jars}", classes.display());
        Java {
            program: *program,
            dir,
            java,
            classpath,
        }
    }

    /// The log every contender of the test appends to.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("shared.log")
    }

    /// `log()` as a command-line argument.
    pub fn log_arg(&self) -> String {
        self.log().display().to_string()
    }

    /// Starts `<class> <args...>`, its stderr going to `<name>.stderr` in the scratch directory.
    pub fn spawn(&self, name: &str, args: &[&str]) -> JavaProc {
        let stderr_path = self.dir.path().join(format!("{name}.stderr"));
        let stderr = File::create(&stderr_path).unwrap();
        let mut child = Command::new(&self.java)
            .args(JVM_FLAGS)
            .arg("-cp")
            .arg(&self.classpath)
            .arg(self.program.class)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.java.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = crossbeam_channel::unbounded();
        thread::Builder::new()
            .name(format!("{name}-stdout"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .unwrap();
        JavaProc {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
            stderr: stderr_path,
            stdout_tail: self.program.stdout_tail,
        }
    }
}

/// A running JVM of a `JavaProgram`: killed when dropped (so also when the test panics). Its
/// stdin stays open as long as this lives; the program closes its session and exits on end of
/// file, so even a killed test process leaves no JVM behind.
pub struct JavaProc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line received so far.
    pub seen: Vec<String>,
    stderr: PathBuf,
    stdout_tail: Option<usize>,
}

impl JavaProc {
    /// Its exit status, if it has exited.
    pub fn status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// What it printed, for failure messages.
    pub fn describe(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let stderr = fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let status = self.status();
        let (heading, out) = match self.stdout_tail {
            None => ("stdout", &self.seen[..]),
            Some(n) => (
                "stdout (tail)",
                &self.seen[self.seen.len().saturating_sub(n)..],
            ),
        };
        format!(
            "Java contender {} (status {:?})\n--- {heading}\n{}\n--- stderr (tail of {})\n{}",
            self.name,
            status,
            out.join("\n"),
            self.stderr.display(),
            tail.join("\n")
        )
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line within `timeout` (kept in `seen` too); `None` on timeout or after
    /// its stdout closed.
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// Panics if it has exited.
    pub fn assert_running(&mut self) {
        if self.status().is_some() {
            panic!("exited early: {}", self.describe());
        }
    }

    /// Waits for the next stdout line starting with `prefix` (earlier lines are kept in `seen`).
    pub fn expect_line(&mut self, prefix: &str) -> String {
        let end = Instant::now() + patience();
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("ended before printing {prefix:?}: {}", self.describe())
                }
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() > end {
                        panic!("timed out waiting for {prefix:?}: {}", self.describe());
                    }
                }
            }
        }
    }

    /// The lines printed since the last look (also kept in `seen`).
    pub fn fresh_lines(&mut self) -> Vec<String> {
        let fresh: Vec<String> = self.lines.try_iter().collect();
        self.seen.extend(fresh.iter().cloned());
        fresh
    }

    /// Writes `command` as one line to its stdin.
    pub fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        if let Err(e) = writeln!(stdin, "{command}").and_then(|_| stdin.flush()) {
            panic!("sending {command:?}: {e}: {}", self.describe());
        }
    }

    /// Waits for a successful exit; returns everything it printed.
    pub fn finish(&mut self) -> Vec<String> {
        let end = Instant::now() + patience();
        let status = loop {
            if let Some(status) = self.status() {
                break status;
            }
            if Instant::now() > end {
                panic!("did not finish: {}", self.describe());
            }
            thread::sleep(Duration::from_millis(25));
        };
        // Its stdout is closed now: drain to the end.
        while let Ok(line) = self.lines.recv_timeout(patience()) {
            self.seen.push(line);
        }
        if !status.success() {
            panic!("failed: {}", self.describe());
        }
        self.seen.clone()
    }
}

impl Drop for JavaProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Contenders named `J...` are Java's, the others zklock's.
pub fn is_java(name: &str) -> bool {
    name.starts_with('J')
}

// ---------------------------------------------------------------------------
// The Rust side
// ---------------------------------------------------------------------------

/// One line, one write, in append mode (as the Java side does).
pub fn append(log: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
    f.write_all(format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("appending to {}: {e}", log.display()));
}

/// Waits until a contender thread has ended, failing (not hanging) if it does not end within
/// `patience()`.
pub fn wait_finished<T>(handle: &JoinHandle<T>) {
    let end = Instant::now() + patience();
    while !handle.is_finished() {
        assert!(
            Instant::now() < end,
            "zklock contender {:?} did not finish",
            handle.thread().name()
        );
        thread::sleep(Duration::from_millis(25));
    }
}

/// Joins a contender thread, failing (not hanging) if it does not end within `patience()`, and
/// quoting its panic if it panicked.
pub fn join<T>(handle: JoinHandle<T>) -> T {
    wait_finished(&handle);
    let name = handle.thread().name().unwrap_or("?").to_owned();
    match handle.join() {
        Ok(v) => v,
        Err(payload) => {
            let why = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("zklock contender {name} panicked: {why}")
        }
    }
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Polls `f` until it returns `Ok` or `patience()` passes; the panic quotes the last `Err`.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let end = Instant::now() + patience();
    loop {
        match f() {
            Ok(v) => return v,
            Err(why) if Instant::now() > end => panic!("timed out waiting for {what}: {why}"),
            Err(_) => thread::sleep(Duration::from_millis(25)),
        }
    }
}

/// Paths at or under `path` that some session watches (`wchc`).
pub fn watched(server: &TestingServer, path: &str) -> BTreeSet<String> {
    let under = format!("{path}/");
    server
        .four_letter("wchc")
        .expect("wchc")
        .lines()
        .map(str::trim)
        .filter(|l| *l == path || l.starts_with(&under))
        .map(str::to_owned)
        .collect()
}

/// Waits (`eventually(what, ...)`) until no session watches `path` or anything under it.
pub fn wait_unwatched(server: &TestingServer, what: &str, path: &str) {
    eventually(what, || {
        let w = watched(server, path);
        if w.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "watched: {w:?}\n{}",
                server.four_letter("wchc").unwrap()
            ))
        }
    });
}

/// The shared log's text and its lines `<tag> <rest>`, each parsed by `parse(tag, rest)`; panics
/// on a line without a space or one `parse` refuses.
pub fn read_log<E>(log: &Path, parse: impl Fn(&str, &str) -> Option<E>) -> (String, Vec<E>) {
    let text = fs::read_to_string(log).unwrap_or_default();
    let events = text
        .lines()
        .map(|l| {
            l.split_once(' ')
                .and_then(|(tag, rest)| parse(tag, rest))
                .unwrap_or_else(|| panic!("bad line {l:?} in the shared log:\n{text}"))
        })
        .collect();
    (text, events)
}
