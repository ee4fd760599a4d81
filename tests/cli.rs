//! The `zklock` binary, run as a user would, against real servers: `run` (exclusion, exit
//! codes, a lost session, `--timeout`, forwarded signals), `holders` beside a Curator holder,
//! `watch`, `revoke`, `break` and `elect`.
//!
//! Every process a test starts is ended by the test (SIGCONT, SIGTERM, then SIGKILL on drop);
//! no assertion is about durations, every wait is on a condition with `patience()`.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::java::{Java, JavaProgram};
use common::{client, patience, wait_for};
use zklock::testing::TestingServer;
use zklock::{Client, InterProcessMutex};

const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");

const CURATOR_MUTEX: JavaProgram = JavaProgram {
    class: "CuratorMutex",
    recipes: "InterProcessMutex",
    scratch_prefix: "zklock-cli-",
    stdout_tail: None,
};

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "zklock-cli-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// `zklock --connect <server> <args>`.
fn zklock(server: &TestingServer, args: &[&str]) -> Command {
    let mut c = Command::new(ZKLOCK);
    c.arg("--connect").arg(server.connect_string()).args(args);
    c.stdin(Stdio::null());
    c
}

/// A `zklock` process this test started: ended on drop (resumed, SIGTERM — which it forwards to
/// its command — then SIGKILL).
struct Proc {
    child: Child,
    status: Option<ExitStatus>,
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

impl Proc {
    fn spawn(mut command: Command) -> Proc {
        Proc {
            child: command.spawn().expect("start zklock"),
            status: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        if self.status.is_none() {
            signal(self.pid(), sig);
        }
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    /// Waits (with patience) for the exit; its code.
    fn code(&mut self) -> i32 {
        let end = Instant::now() + patience();
        while self.try_status().is_none() {
            assert!(
                Instant::now() < end,
                "zklock (pid {}) did not exit",
                self.pid()
            );
            thread::sleep(Duration::from_millis(25));
        }
        self.status
            .unwrap()
            .code()
            .expect("zklock exits, not killed")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_status().is_some() {
            return;
        }
        self.signal("CONT");
        self.signal("TERM");
        let end = Instant::now() + Duration::from_secs(20);
        while self.try_status().is_none() && Instant::now() < end {
            thread::sleep(Duration::from_millis(25));
        }
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `sh -c` command for `zklock run`: appends `enter <name> <token>`, waits for the file
/// `<go>` (if given), appends `exit <name>`, exits with `code`. SIGTERM appends `term <name>`
/// and exits 143 (as a shell's default would).
fn worker(log: &Path, name: &str, go: Option<&Path>, code: i32) -> Vec<String> {
    let wait = match go {
        Some(go) => format!("while [ ! -f '{}' ]; do sleep 0.05; done; ", go.display()),
        None => String::new(),
    };
    let log = log.display();
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "trap 'echo term {name} >> {log}; exit 143' TERM; \
             echo \"enter {name} $ZKLOCK_FENCING_TOKEN $ZKLOCK_NODE\" >> {log}; \
             {wait}echo exit {name} >> {log}; exit {code}"
        ),
    ]
}

fn run(server: &TestingServer, path: &str, opts: &[&str], command: &[String]) -> Command {
    let mut c = zklock(server, &["run", path]);
    c.args(opts).arg("--").args(command);
    c
}

fn lines(log: &Path) -> Vec<String> {
    read(log).lines().map(str::to_owned).collect()
}

/// The fencing token `name` logged on entering.
fn token(log: &Path, name: &str) -> u64 {
    lines(log)
        .iter()
        .find_map(|l| l.strip_prefix(&format!("enter {name} ")))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token for {name} in {:?}", lines(log)))
}

fn entered(log: &Path, name: &str) -> bool {
    read(log).contains(&format!("enter {name} "))
}

fn children(client: &Client, path: &str) -> usize {
    client.children(path).map(|c| c.len()).unwrap_or(0)
}

fn json(output: &[u8]) -> serde_json::Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(output)))
}

/// The one schema of `holders --json` on every backend (`docs/cli.md`): panics where `doc`
/// breaks it, and gives its entries.
fn entries_of(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<_> = v.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(doc), ["backend", "entries", "layout", "name"], "{doc}");
    assert!(
        doc["backend"].is_string() && doc["name"].is_string(),
        "{doc}"
    );
    assert!(
        ["mutex", "read-write", "semaphore", "latch", "empty"]
            .contains(&doc["layout"].as_str().unwrap()),
        "{doc}"
    );
    let entries = doc["entries"].as_array().expect("entries").clone();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(
            keys(e),
            [
                "age_ms",
                "expires_in_ms",
                "fencing_token",
                "holds",
                "id",
                "kind",
                "owner",
                "position",
                "session"
            ],
            "{e}"
        );
        assert_eq!(e["position"], i, "{e}");
        assert!(e["id"].is_string() && e["kind"].is_string(), "{e}");
        assert!(e["holds"].is_boolean() || e["holds"].is_null(), "{e}");
        for text in ["owner", "session"] {
            assert!(e[text].is_string() || e[text].is_null(), "{e}");
        }
        for number in ["fencing_token", "age_ms", "expires_in_ms"] {
            assert!(e[number].is_u64() || e[number].is_null(), "{e}");
        }
    }
    entries
}

/// A table's rows (below the title and the header) as cells: columns are two or more spaces
/// apart, and no cell holds two spaces in a row.
fn table_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(2)
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn holders_json(server: &TestingServer, path: &str) -> serde_json::Value {
    let out = zklock(server, &["holders", path, "--json"])
        .output()
        .expect("zklock holders");
    assert!(
        out.status.success(),
        "holders failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json(&out.stdout);
    entries_of(&doc);
    doc
}

#[test]
fn two_runs_never_overlap_and_pass_the_exit_codes_through() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let (log, go) = (dir.file("log"), dir.file("go"));

    let mut a = Proc::spawn(run(
        &server,
        "/cli/run",
        &[],
        &worker(&log, "a", Some(&go), 3),
    ));
    wait_for("a to enter", || entered(&log, "a"));
    let mut b = Proc::spawn(run(&server, "/cli/run", &[], &worker(&log, "b", None, 5)));
    wait_for("b to queue behind a", || children(&zk, "/cli/run") == 2);
    assert!(!entered(&log, "b"), "b ran while a held the lock");
    fs::write(&go, "").unwrap();

    assert_eq!(a.code(), 3, "a's command's status");
    assert_eq!(b.code(), 5, "b's command's status");
    let order: Vec<String> = lines(&log)
        .iter()
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(order, ["enter a", "exit a", "enter b", "exit b"]);
    assert!(token(&log, "b") > token(&log, "a"), "tokens rise");
    wait_for("no node left", || children(&zk, "/cli/run") == 0);
}

#[test]
fn a_lost_session_terminates_the_command_and_the_next_holder_has_a_higher_token() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");

    let mut a = Proc::spawn({
        let mut c = zklock(&server, &["--session-timeout", "2s", "run", "/cli/lost"]);
        c.args(["--kill-after", "30s", "--"])
            .args(worker(&log, "a", Some(&dir.file("never")), 0));
        c
    });
    wait_for("a to enter", || entered(&log, "a"));
    let mut b = Proc::spawn(run(&server, "/cli/lost", &[], &worker(&log, "b", None, 0)));
    wait_for("b to queue", || children(&zk, "/cli/lost") == 2);

    // zklock a stands still past its session timeout: the server expires the session, b gets
    // the lock; a's command goes on meanwhile (that is what fencing tokens are for).
    a.signal("STOP");
    wait_for("b to enter after a's session expired", || {
        entered(&log, "b")
    });
    a.signal("CONT");
    assert_eq!(a.code(), 123, "the documented 'lock lost' code");
    assert!(
        read(&log).contains("term a"),
        "a's command got SIGTERM: {:?}",
        lines(&log)
    );
    assert_eq!(b.code(), 0);
    assert!(token(&log, "b") > token(&log, "a"));
    wait_for("no node left", || children(&zk, "/cli/lost") == 0);
}

#[test]
fn timeout_exits_124_without_running_and_sigterm_is_forwarded() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");

    let mut a = Proc::spawn(run(
        &server,
        "/cli/timeout",
        &[],
        &worker(&log, "a", Some(&dir.file("never")), 0),
    ));
    wait_for("a to enter", || entered(&log, "a"));

    let mut b = Proc::spawn(run(
        &server,
        "/cli/timeout",
        &["--timeout", "1s"],
        &worker(&log, "b", None, 0),
    ));
    assert_eq!(b.code(), 124, "the documented timeout code");
    assert!(!entered(&log, "b"), "the command never ran");
    assert_eq!(children(&zk, "/cli/timeout"), 1, "b left no node behind");

    // SIGTERM to zklock goes to its command, whose status zklock exits with; the lock is
    // released.
    a.signal("TERM");
    assert_eq!(a.code(), 143);
    assert!(
        read(&log).contains("term a"),
        "forwarded: {:?}",
        lines(&log)
    );
    wait_for("a's node gone", || children(&zk, "/cli/timeout") == 0);
}

#[test]
fn an_unknown_or_malformed_scheme_is_bad_usage_with_the_list() {
    for connect in [
        "etcd://127.0.0.1:2379",
        "redis:/127.0.0.1",
        "redis:127.0.0.1",
    ] {
        let out = Command::new(ZKLOCK)
            .args(["--connect", connect, "holders", "x"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{connect}: {err}");
        assert!(
            err.contains("redis://") && err.contains("postgres://") && err.contains("zk://"),
            "{connect}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_command_that_is_not_found_exits_127_and_errors_are_one_line() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let out = run(&server, "/cli/nf", &[], &["no-such-command-zklock".into()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("zklock: error: cannot run"), "{err}");
    wait_for("no node left", || children(&zk, "/cli/nf") == 0);

    let out = Command::new(ZKLOCK)
        .args(["--connect", "127.0.0.1:1", "--connection-timeout", "1s"])
        .args(["holders", "/cli/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("zklock: error: cannot connect to 127.0.0.1:1"),
        "{err}"
    );

    let out = Command::new(ZKLOCK).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Examples:"));
}

#[test]
fn holders_lists_a_curator_holder_and_zklock_waiters_in_queue_order() {
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let zk = client(&connect, Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");

    let java = Java::compile(&CURATOR_MUTEX);
    let log_arg = java.log_arg();
    let mut curator = java.spawn(
        "curator",
        &["--hold", &connect, "/cli/holders", "curator", &log_arg],
    );
    curator.expect_line("ENTER curator");
    let _b = Proc::spawn(run(
        &server,
        "/cli/holders",
        &[],
        &worker(&log, "b", None, 0),
    ));
    wait_for("b to queue", || children(&zk, "/cli/holders") == 2);
    let _c = Proc::spawn(run(
        &server,
        "/cli/holders",
        &[],
        &worker(&log, "c", None, 0),
    ));
    wait_for("c to queue", || children(&zk, "/cli/holders") == 3);

    let v = holders_json(&server, "/cli/holders");
    assert_eq!(v["layout"], "mutex");
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    let holds: Vec<_> = entries.iter().map(|e| e["holds"].as_bool()).collect();
    assert_eq!(holds, [Some(true), Some(false), Some(false)]);
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        entries[1]["owner"],
        host.trim(),
        "zklock writes its host name"
    );
    assert_eq!(entries[2]["owner"], host.trim());
    assert!(
        !entries[0]["owner"].as_str().unwrap().is_empty(),
        "Curator's host IP"
    );
    let tokens: Vec<u64> = entries
        .iter()
        .map(|e| e["fencing_token"].as_u64().unwrap())
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "queue order: {tokens:?}"
    );
    for e in entries {
        assert!(e["session"].as_str().unwrap().starts_with("0x"));
        assert_eq!(e["kind"], "lock");
    }

    let table = zklock(&server, &["holders", "/cli/holders"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("/cli/holders (mutex on zookeeper, 3 entries)"),
        "{table}"
    );
    assert!(table.contains("POS"), "{table}");

    curator.send("release");
    wait_for("b to run", || entered(&log, "b"));
    wait_for("all done", || children(&zk, "/cli/holders") == 0);
    curator.finish();
}

#[test]
fn holders_shows_read_write_and_semaphore_layouts() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let (log, go) = (dir.file("log"), dir.file("go"));

    let _w = Proc::spawn(run(
        &server,
        "/cli/rw",
        &["--write"],
        &worker(&log, "w", Some(&go), 0),
    ));
    wait_for("w to enter", || entered(&log, "w"));
    let _r = Proc::spawn(run(
        &server,
        "/cli/rw",
        &["--read"],
        &worker(&log, "r", Some(&go), 0),
    ));
    wait_for("r to queue", || children(&zk, "/cli/rw") == 2);
    let v = holders_json(&server, "/cli/rw");
    assert_eq!(v["layout"], "read-write");
    let kinds: Vec<_> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].clone(), e["holds"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [("write".into(), true.into()), ("read".into(), false.into())]
    );

    let _s1 = Proc::spawn(run(
        &server,
        "/cli/sem",
        &["--semaphore", "2"],
        &worker(&log, "s1", Some(&go), 0),
    ));
    let _s2 = Proc::spawn(run(
        &server,
        "/cli/sem",
        &["--semaphore", "2"],
        &worker(&log, "s2", Some(&go), 0),
    ));
    wait_for("two leases", || entered(&log, "s1") && entered(&log, "s2"));
    let out = zklock(
        &server,
        &["holders", "/cli/sem", "--max-leases", "2", "--json"],
    )
    .output()
    .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["layout"], "semaphore");
    let entries = v["entries"].as_array().unwrap();
    assert!(entries
        .iter()
        .filter(|e| e["kind"] == "lease")
        .all(|e| e["holds"] == true));
    assert_eq!(entries.iter().filter(|e| e["kind"] == "lease").count(), 2);
    fs::write(&go, "").unwrap();
    wait_for("all released", || {
        children(&zk, "/cli/rw") == 0 && children(&zk, "/cli/sem/leases") == 0
    });
}

/// The lines `proc` prints on its (piped) stdout, as they come.
fn stdout_lines(proc: &mut Proc) -> crossbeam_channel::Receiver<String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let stdout = proc.child.stdout.take().expect("stdout piped");
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (with patience) for the next line of `lines` that contains `want`, skipping others.
fn expect_line(lines: &crossbeam_channel::Receiver<String>, want: &str) {
    let end = Instant::now() + patience();
    loop {
        let line = lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("never printed {want:?}"));
        if line.contains(want) {
            return;
        }
    }
}

#[test]
fn watch_prints_a_change() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let mut watch = Proc::spawn({
        let mut c = zklock(&server, &["watch", "/cli/watch"]);
        c.stdout(Stdio::piped());
        c
    });
    let out = stdout_lines(&mut watch);
    let expect = |want: &str| expect_line(&out, want);
    expect("/cli/watch (empty on zookeeper, 0 entries)");
    let mutex = InterProcessMutex::new(&zk, "/cli/watch").unwrap();
    let guard = mutex.lock().unwrap();
    expect("/cli/watch (mutex on zookeeper, 1 entry)");
    guard.release().unwrap();
    expect("/cli/watch (empty on zookeeper, 0 entries)");
    watch.signal("INT");
    watch.try_status();
}

#[test]
fn revoke_makes_a_revocable_holder_release() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");
    let mut a = Proc::spawn(run(
        &server,
        "/cli/revoke",
        &["--revocable"],
        &worker(&log, "a", Some(&dir.file("never")), 0),
    ));
    wait_for("a to enter", || entered(&log, "a"));
    let node = holders_json(&server, "/cli/revoke")["entries"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = zklock(&server, &["revoke", &node]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.code(), 143, "the command was stopped with SIGTERM");
    assert!(read(&log).contains("term a"));
    wait_for("released", || children(&zk, "/cli/revoke") == 0);
}

#[test]
fn break_refuses_without_yes_and_refuses_foreign_nodes() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let mutex = InterProcessMutex::new(&zk, "/cli/break").unwrap();
    let guard = mutex.lock().unwrap();
    let node = mutex.lock_node().unwrap();

    let out = zklock(&server, &["break", &node]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "not confirmed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lock node of session 0x"),
        "shows the owner: {err}"
    );
    assert!(zk.exists(&node).unwrap().is_some(), "left alone");

    zk.create("/cli/break/config").call().unwrap();
    let out = zklock(&server, &["break", "/cli/break/config", "--yes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a lock node"));
    assert!(zk.exists("/cli/break/config").unwrap().is_some());

    let out = zklock(&server, &["break", &node, "--yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(zk.exists(&node).unwrap().is_none());
    wait_for("the holder to see its lock lost", || {
        guard.health() == zklock::LockHealth::Lost
    });
    let _ = guard.release();
}

#[test]
fn elect_runs_the_command_while_leading_one_at_a_time() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let (log, go) = (dir.file("log"), dir.file("go"));
    let elect = |name: &str, go: Option<&Path>, code| {
        let mut c = zklock(&server, &["elect", "/cli/elect", "--id", name, "--"]);
        c.args(worker(&log, name, go, code));
        Proc::spawn(c)
    };
    let mut a = elect("a", Some(&go), 4);
    wait_for("a to lead", || entered(&log, "a"));
    let mut b = elect("b", None, 0);
    wait_for("b to queue", || children(&zk, "/cli/elect") == 2);
    assert!(!entered(&log, "b"));
    fs::write(&go, "").unwrap();
    assert_eq!(a.code(), 4);
    assert_eq!(b.code(), 0);
    assert!(token(&log, "b") > token(&log, "a"));
    wait_for("no node left", || children(&zk, "/cli/elect") == 0);
}

#[test]
fn a_signal_while_waiting_exits_128_plus_it_and_leaves_no_node() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");
    let _a = Proc::spawn(run(
        &server,
        "/cli/int",
        &[],
        &worker(&log, "a", Some(&dir.file("never")), 0),
    ));
    wait_for("a to enter", || entered(&log, "a"));
    let mut b = Proc::spawn(run(&server, "/cli/int", &[], &worker(&log, "b", None, 0)));
    wait_for("b to queue", || children(&zk, "/cli/int") == 2);
    b.signal("INT");
    assert_eq!(b.code(), 130);
    assert!(!entered(&log, "b"));
    assert_eq!(children(&zk, "/cli/int"), 1, "b's node is gone");
}

#[test]
fn suspended_past_the_grace_counts_as_lost() {
    let mut server = TestingServer::start().unwrap();
    let dir = Scratch::new();
    let log = dir.file("log");
    let mut a = Proc::spawn({
        let mut c = zklock(&server, &["--session-timeout", "30s", "run", "/cli/grace"]);
        c.args(["--suspended-grace", "1s", "--"]).args(worker(
            &log,
            "a",
            Some(&dir.file("never")),
            0,
        ));
        c
    });
    wait_for("a to enter", || entered(&log, "a"));
    server.stop().unwrap();
    assert_eq!(a.code(), 123, "suspended past --suspended-grace: lost");
    assert!(read(&log).contains("term a"), "{:?}", lines(&log));
}

#[test]
fn elect_stops_the_command_when_leadership_is_lost() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");
    let mut a = Proc::spawn({
        let mut c = zklock(
            &server,
            &[
                "--session-timeout",
                "2s",
                "elect",
                "/cli/elect-lost",
                "--id",
                "a",
                "--",
            ],
        );
        c.args(worker(&log, "a", Some(&dir.file("never")), 0));
        c
    });
    wait_for("a to lead", || entered(&log, "a"));
    let mut b = Proc::spawn({
        let mut c = zklock(&server, &["elect", "/cli/elect-lost", "--id", "b", "--"]);
        c.args(worker(&log, "b", None, 0));
        c
    });
    wait_for("b to queue", || children(&zk, "/cli/elect-lost") == 2);
    a.signal("STOP");
    wait_for("b to lead after a's session expired", || entered(&log, "b"));
    a.signal("CONT");
    assert_eq!(a.code(), 123);
    assert!(read(&log).contains("term a"));
    assert_eq!(b.code(), 0);
    assert!(token(&log, "b") > token(&log, "a"));
}

#[test]
fn elect_with_requeue_runs_the_command_again_until_stopped() {
    let server = TestingServer::start().unwrap();
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    let dir = Scratch::new();
    let log = dir.file("log");
    let mut a = Proc::spawn({
        let mut c = zklock(&server, &["elect", "/cli/requeue", "--requeue", "--"]);
        c.args(["sh", "-c"]).arg(format!(
            "echo \"term $ZKLOCK_FENCING_TOKEN\" >> {}; sleep 0.2",
            log.display()
        ));
        c
    });
    wait_for("a second term", || lines(&log).len() >= 2);
    let tokens: Vec<u64> = lines(&log)
        .iter()
        .filter_map(|l| l.strip_prefix("term ")?.parse().ok())
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "epochs rise: {tokens:?}"
    );
    a.signal("TERM");
    // Between terms zklock exits 128+15 itself; during one the command dies of the forwarded
    // SIGTERM, which a shell reports as 128+15 too.
    assert_eq!(a.code(), 143);
    wait_for("no node left", || children(&zk, "/cli/requeue") == 0);
}

/// Whether process `pid` is still running (a zombie is not).
fn running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// `zklock run` killed with SIGKILL takes its command with it, before the lock can pass on: the
/// kernel kills the command when zklock dies. Each holder's command, once it holds, checks that
/// every earlier holder's command is gone, then runs on until its zklock is killed; `rounds` times
/// (`ZKLOCK_CLI_KILL_ROUNDS` overrides it). `connect` is the `--connect` argument.
fn a_killed_run_takes_its_command_along(connect: &str, rounds: usize) {
    let rounds = std::env::var("ZKLOCK_CLI_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(rounds);
    let scratch = Scratch::new();
    let (pids, checks) = (scratch.file("pids"), scratch.file("checks"));
    fs::write(&pids, "").unwrap();
    let script = format!(
        "for p in $(cat '{pids}'); do \
           s=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' /proc/$p/status 2>/dev/null); \
           case \"$s\" in ''|Z|X) ;; *) echo \"alive $p $s\" >> '{checks}';; esac; \
         done; echo checked >> '{checks}'; echo $$ >> '{pids}'; exec sleep 600",
        pids = pids.display(),
        checks = checks.display(),
    );
    let start = || {
        let mut c = Command::new(ZKLOCK);
        c.args([
            "--connect",
            connect,
            "--session-timeout",
            "2s",
            "run",
            "killed",
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null());
        Proc::spawn(c)
    };
    let checked = || lines(&checks).iter().filter(|l| *l == "checked").count();
    // Commands left by a failure are ended here, not left to run for ten minutes.
    struct Commands(PathBuf);
    impl Drop for Commands {
        fn drop(&mut self) {
            for pid in read(&self.0).split_whitespace() {
                signal(pid.parse().unwrap_or(0), "KILL");
            }
        }
    }
    let _commands = Commands(pids.clone());
    let mut holder = start();
    wait_for("the first command", || checked() == 1);
    for round in 1..=rounds {
        let next = start();
        holder.signal("KILL");
        wait_for("the next command", || checked() == round + 1);
        holder = next;
    }
    let alive: Vec<_> = lines(&checks)
        .into_iter()
        .filter(|l| l.starts_with("alive"))
        .collect();
    assert!(
        alive.is_empty(),
        "a command ran on after its zklock was killed: {alive:?}"
    );
    holder.signal("KILL");
    let last: u32 = read(&pids)
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    wait_for("the last command to end with its zklock", || !running(last));
}

#[test]
fn a_killed_run_takes_its_command_along_on_zookeeper() {
    let server = TestingServer::start().unwrap();
    a_killed_run_takes_its_command_along(&server.connect_string(), 3);
}

/// When the lock is lost, what the command started stops with it: the command leads a process
/// group of its own and the whole group is signalled. (With `--foreground`, as before, only the
/// command is.)
#[test]
fn a_lost_lock_stops_what_the_command_started_too() {
    let server = TestingServer::start().unwrap();
    let dir = Scratch::new();
    let (log, pidfile) = (dir.file("log"), dir.file("grandchild"));
    let script = format!(
        "sleep 1000 & echo $! > {pid}; echo \"enter a $ZKLOCK_FENCING_TOKEN x\" >> {log}; wait",
        pid = pidfile.display(),
        log = log.display()
    );
    let mut a = Proc::spawn({
        let mut c = zklock(&server, &["--session-timeout", "2s", "run", "/cli/group"]);
        c.args(["--kill-after", "5s", "--", "sh", "-c", &script]);
        c
    });
    wait_for("the command to start its own child", || {
        entered(&log, "a") && !read(&pidfile).trim().is_empty()
    });
    let grandchild: u32 = read(&pidfile).trim().parse().unwrap();
    assert!(running(grandchild));
    // Frozen past its session: the lock is lost when zklock runs again.
    a.signal("STOP");
    let zk = client(&server.connect_string(), Duration::from_secs(20));
    wait_for("the frozen holder's session to expire", || {
        children(&zk, "/cli/group") == 0
    });
    a.signal("CONT");
    assert_eq!(a.code(), 123, "the documented 'lock lost' code");
    let stopped = {
        let deadline = std::time::Instant::now() + patience();
        while running(grandchild) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        !running(grandchild)
    };
    if !stopped {
        signal(grandchild, "KILL");
    }
    assert!(stopped, "the command's own child outlived the lost lock");
}

/// A secret kept off the command line: `--digest-file` (and `ZKLOCK_DIGEST`); both a file and
/// a `--digest` is refused, and a file that cannot be read is named.
#[test]
fn the_digest_can_come_from_a_file_or_the_environment() {
    let server = TestingServer::start().unwrap();
    let dir = Scratch::new();
    let file = dir.file("digest");
    fs::write(&file, "app:s3cret\n").unwrap();
    let holders = |extra: &[&str], env: Option<&str>| {
        let mut c = zklock(&server, &[]);
        c.args(extra).args(["holders", "/cli/digest"]);
        if let Some(d) = env {
            c.env("ZKLOCK_DIGEST", d);
        }
        c.output().unwrap()
    };
    let by_file = holders(&["--digest-file", file.to_str().unwrap()], None);
    assert!(by_file.status.success(), "{by_file:?}");
    let by_env = holders(&[], Some("app:s3cret"));
    assert!(by_env.status.success(), "{by_env:?}");
    let both = holders(
        &["--digest", "app:x", "--digest-file", file.to_str().unwrap()],
        None,
    );
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("give the digest once"));
    let missing = holders(&["--digest-file", "/nonexistent/zklock-digest"], None);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--digest-file"));
}

// ---------------------------------------------------------------------------
// On Redis: `--connect redis://…`.
// ---------------------------------------------------------------------------

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;
    use zklock::testing::TestingRedis;

    fn zklock_redis(server: &TestingRedis, args: &[&str]) -> Command {
        let mut c = Command::new(ZKLOCK);
        c.arg("--connect").arg(server.url()).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn run_redis(server: &TestingRedis, name: &str, opts: &[&str], command: &[String]) -> Command {
        let mut c = zklock_redis(server, &["run", name]);
        c.args(opts).arg("--").args(command);
        c
    }

    #[test]
    fn a_killed_run_takes_its_command_along_on_redis() {
        let server = TestingRedis::start().unwrap();
        a_killed_run_takes_its_command_along(&server.url(), 3);
    }

    #[test]
    fn two_runs_on_redis_never_overlap_and_tokens_rise() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let mut a = Proc::spawn(run_redis(
            &server,
            "cli",
            &[],
            &worker(&log, "a", Some(&go), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        let mut b = Proc::spawn(run_redis(&server, "cli", &[], &worker(&log, "b", None, 7)));
        // b queues behind a; it does not enter while a holds.
        let queue = "zklock:{cli}:queue";
        wait_for("b to queue", || {
            server.command(&["LLEN", queue]).unwrap() == "1"
        });
        assert!(!entered(&log, "b"));
        fs::write(&go, "").unwrap();
        assert_eq!(a.code(), 0);
        assert_eq!(b.code(), 7, "the command's exit code passes through");
        assert_eq!(
            lines(&log)
                .iter()
                .map(|l| l.split(' ').next().unwrap())
                .collect::<Vec<_>>(),
            ["enter", "exit", "enter", "exit"]
        );
        assert!(token(&log, "b") > token(&log, "a"));
        assert!(read(&log).contains("enter a ") && read(&log).contains(" zklock:{cli}"));
    }

    #[test]
    fn the_second_run_starts_right_after_the_first_exits() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let (ended, started) = (scratch.file("ended"), scratch.file("started"));
        let mut a = Proc::spawn(run_redis(
            &server,
            "next",
            &[],
            &[
                "sh".into(),
                "-c".into(),
                format!("sleep 1; date +%s%N > '{}'", ended.display()),
            ],
        ));
        wait_for("a to hold", || {
            server.command(&["EXISTS", "zklock:{next}"]).unwrap() == "1"
        });
        let mut b = Proc::spawn(run_redis(
            &server,
            "next",
            &[],
            &[
                "sh".into(),
                "-c".into(),
                format!("date +%s%N > '{}'", started.display()),
            ],
        ));
        assert_eq!(a.code(), 0);
        assert_eq!(b.code(), 0);
        let at = |f: &Path| -> i128 { read(f).trim().parse().unwrap() };
        // From the first command's end: the first zklock's release, the hand-off and the
        // second's start of its command all fall in it.
        let gap_ms = (at(&started) - at(&ended)) as f64 / 1e6;
        println!("the second command started {gap_ms:.1} ms after the first command ended");
        assert!(
            gap_ms < 1000.0,
            "the second waited {gap_ms} ms after the first's end"
        );
    }

    #[test]
    fn a_run_whose_redis_lock_is_lost_stops_its_command_with_123() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let never = scratch.file("never");
        let mut a = Proc::spawn(run_redis(
            &server,
            "lost",
            &["--session-timeout", "1s", "--kill-after", "2s"],
            &worker(&log, "a", Some(&never), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        server.command(&["DEL", "zklock:{lost}"]).unwrap();
        assert_eq!(a.code(), 123);
        assert!(read(&log).contains("term a"), "the command got SIGTERM");
    }

    #[test]
    fn a_timed_out_run_on_redis_exits_124_and_a_semaphore_lets_two_in() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let opts = ["--semaphore", "2"];
        let _a = Proc::spawn(run_redis(
            &server,
            "sem",
            &opts,
            &worker(&log, "a", Some(&go), 0),
        ));
        let _b = Proc::spawn(run_redis(
            &server,
            "sem",
            &opts,
            &worker(&log, "b", Some(&go), 0),
        ));
        wait_for("two to hold", || entered(&log, "a") && entered(&log, "b"));
        let mut c = Proc::spawn(run_redis(
            &server,
            "sem",
            &["--semaphore", "2", "--timeout", "300ms"],
            &worker(&log, "c", None, 0),
        ));
        assert_eq!(c.code(), 124);
        assert!(!entered(&log, "c"));
        fs::write(&go, "").unwrap();
    }

    #[test]
    fn elect_on_redis_runs_the_command_while_leading_and_then_the_next() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let never = scratch.file("never");
        let elect = |name: &str| {
            let mut c = zklock_redis(&server, &["elect", "leader", "--id", name, "--"]);
            c.args(worker(&log, name, Some(&never), 0));
            Proc::spawn(c)
        };
        let mut a = elect("a");
        wait_for("a to lead", || entered(&log, "a"));
        let mut b = elect("b");
        wait_for("b to queue", || {
            server.command(&["LLEN", "zklock:{leader}:queue"]).unwrap() == "1"
        });
        assert!(!entered(&log, "b"));
        a.signal("TERM");
        assert_eq!(a.code(), 143, "the command's own status after SIGTERM");
        wait_for("b to lead", || entered(&log, "b"));
        assert!(token(&log, "b") > token(&log, "a"));
        b.signal("TERM");
        assert_eq!(b.code(), 143);
    }

    #[test]
    fn zklock_connect_names_the_redis_server() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let mut c = Command::new(ZKLOCK);
        c.args(["run", "env", "--"])
            .args(worker(&log, "a", None, 0));
        c.env("ZKLOCK_CONNECT", server.url())
            .env("ZK_CONNECT", "127.0.0.1:1");
        assert_eq!(Proc::spawn(c).code(), 0);
        assert!(read(&log).contains("zklock:{env}"), "{}", read(&log));
    }

    #[test]
    fn holders_on_redis_lists_the_holder_and_the_queue() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let a = Proc::spawn(run_redis(
            &server,
            "seen",
            &[],
            &worker(&log, "a", Some(&go), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        let b = Proc::spawn(run_redis(&server, "seen", &[], &worker(&log, "b", None, 0)));
        wait_for("b to queue", || {
            server.command(&["LLEN", "zklock:{seen}:queue"]).unwrap() == "1"
        });
        let out = zklock_redis(&server, &["holders", "seen", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let doc = json(&out.stdout);
        assert_eq!(doc["backend"], "redis");
        assert_eq!(doc["layout"], "mutex");
        let rows = entries_of(&doc);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0]["holds"], true);
        assert_eq!(rows[0]["kind"], "lock");
        assert!(rows[0]["expires_in_ms"].as_u64().unwrap() > 0, "{rows:?}");
        assert_eq!(rows[0]["fencing_token"].as_u64(), Some(token(&log, "a")));
        let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let owner = |p: &Proc| format!("{} pid {}", host.trim(), p.pid());
        assert_eq!(rows[0]["owner"], owner(&a), "the holder's host and process");
        assert_eq!(rows[1]["holds"], false);
        assert_eq!(rows[1]["owner"], owner(&b));
        assert!(rows[1]["fencing_token"].is_null());
        let table = zklock_redis(&server, &["holders", "seen"])
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&table.stdout);
        let rows = table_rows(&table);
        assert_eq!(rows[0][..3], ["0", "lock", "yes"], "{table}");
        assert_eq!(rows[1][..3], ["1", "lock", "no"], "{table}");
        fs::write(&go, "").unwrap();
    }

    #[test]
    fn nonblock_on_a_busy_lock_exits_124_and_says_who_holds_it() {
        let server = TestingRedis::start().unwrap();
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let _a = Proc::spawn(run_redis(
            &server,
            "busy",
            &[],
            &worker(&log, "a", Some(&go), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        for opts in [
            &["-n"][..],
            &["--timeout", "0"][..],
            &["--timeout", "200ms"][..],
        ] {
            let out = run_redis(&server, "busy", opts, &worker(&log, "b", None, 0))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(124), "{opts:?}: {err}");
            let said = if opts[0] == "-n" || opts[1] == "0" {
                "zklock: busy is busy (held by "
            } else {
                "zklock: timed out after 200ms waiting for busy (held by "
            };
            assert!(err.starts_with(said), "{opts:?}: {err}");
            assert!(err.contains("the command was not run"), "{err}");
        }
        assert!(!entered(&log, "b"));
        fs::write(&go, "").unwrap();
    }

    #[test]
    fn zookeeper_only_commands_say_so_on_redis() {
        let server = TestingRedis::start().unwrap();
        let out = zklock_redis(&server, &["revoke", "x"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "bad usage");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("ZooKeeper only"), "{err}");
    }
}

#[cfg(feature = "postgres")]
mod on_postgres {
    use super::*;
    use zklock::postgres::PgMutex;
    use zklock::testing::TestingPostgres;
    use zklock::PgClient;

    fn zklock_pg(server: &TestingPostgres, args: &[&str]) -> Command {
        let mut c = Command::new(ZKLOCK);
        c.arg("--connect").arg(server.url()).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn run_pg(server: &TestingPostgres, name: &str, opts: &[&str], command: &[String]) -> Command {
        let mut c = zklock_pg(server, &["run", name]);
        c.args(opts).arg("--").args(command);
        c
    }

    #[test]
    fn a_killed_run_takes_its_command_along_on_postgres() {
        let server = TestingPostgres::start().unwrap();
        a_killed_run_takes_its_command_along(&server.url(), 5);
    }

    #[test]
    fn two_runs_on_postgres_never_overlap_and_holders_shows_the_queue() {
        let server = TestingPostgres::start().unwrap();
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let mut a = Proc::spawn(run_pg(
            &server,
            "cli",
            &[],
            &worker(&log, "a", Some(&go), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        let mut b = Proc::spawn(run_pg(&server, "cli", &[], &worker(&log, "b", None, 7)));
        // b queues behind a in the server's lock queue; it does not enter while a holds.
        wait_for("b to queue", || {
            server.advisory_lock("cli").unwrap().1.len() == 1
        });
        assert!(!entered(&log, "b"));
        let (held, waiting) = server.advisory_lock("cli").unwrap();
        let out = zklock_pg(&server, &["holders", "cli", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = json(&out.stdout);
        assert_eq!(doc["backend"], "postgres");
        let rows = entries_of(&doc);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0]["holds"], true);
        assert_eq!(rows[0]["kind"], "lock");
        assert_eq!(rows[0]["session"], held[0].to_string());
        assert!(
            rows[0]["owner"].as_str().unwrap().ends_with("(zklock)"),
            "the application: {rows:?}"
        );
        assert_eq!(rows[1]["holds"], false);
        assert_eq!(rows[1]["session"], waiting[0].to_string());
        assert!(rows[1]["age_ms"].is_u64(), "how long it waits: {rows:?}");
        let table = zklock_pg(&server, &["holders", "cli"]).output().unwrap();
        let table = String::from_utf8_lossy(&table.stdout);
        let rows = table_rows(&table);
        assert_eq!(rows[0][..3], ["0", "lock", "yes"], "{table}");
        assert_eq!(rows[1][..3], ["1", "lock", "no"], "{table}");
        fs::write(&go, "").unwrap();
        assert_eq!(a.code(), 0);
        assert_eq!(b.code(), 7, "the command's exit code passes through");
        assert_eq!(
            lines(&log)
                .iter()
                .map(|l| l.split(' ').next().unwrap())
                .collect::<Vec<_>>(),
            ["enter", "exit", "enter", "exit"]
        );
        assert!(token(&log, "b") > token(&log, "a"));
        assert!(
            read(&log).contains("pg_advisory_lock(hashtextextended('cli', 0))"),
            "{}",
            read(&log)
        );
        let out = zklock_pg(&server, &["holders", "cli"]).output().unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("no one holds or waits"));
    }

    #[test]
    fn watch_on_postgres_shows_another_client_take_wait_for_and_release_a_lock() {
        let server = TestingPostgres::start().unwrap();
        let mut watch = Proc::spawn({
            let mut c = zklock_pg(&server, &["watch", "watched"]);
            c.stdout(Stdio::piped());
            c
        });
        let out = stdout_lines(&mut watch);
        expect_line(&out, "no one holds or waits");
        let client = PgClient::connect(&server.url()).unwrap();
        let mutex = PgMutex::new(&client, "watched").unwrap();
        let guard = mutex.lock().unwrap();
        let pid = mutex.backend_pid().unwrap();
        expect_line(&out, &format!("(zklock)  backend {pid}"));
        // A second session of the same Client queues behind the hold.
        let waiter = thread::spawn({
            let client = client.clone();
            move || {
                let mutex = PgMutex::new(&client, "watched").unwrap();
                mutex.lock().unwrap().release().unwrap();
            }
        });
        expect_line(&out, "lock  no ");
        guard.release().unwrap();
        waiter.join().unwrap();
        expect_line(&out, "no one holds or waits");
        watch.signal("INT");
        watch.try_status();
        client.close();
    }

    #[test]
    fn holders_as_a_role_without_privileges_hides_another_roles_address() {
        let server = TestingPostgres::start().unwrap();
        server
            .sql("CREATE ROLE plain LOGIN PASSWORD 'plain'")
            .unwrap();
        let client = PgClient::connect(&server.url()).unwrap();
        let mutex = PgMutex::new(&client, "seen").unwrap();
        let guard = mutex.lock().unwrap();
        let holders = |url: &str| {
            let out = Command::new(ZKLOCK)
                .args(["--connect", url, "holders", "seen", "--json"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            entries_of(&json(&out.stdout))[0].clone()
        };
        // The plain role sees who holds, but not from where.
        let row = holders(&server.url_as("plain", "plain", "postgres"));
        assert_eq!(row["holds"], true);
        assert_eq!(row["session"], mutex.backend_pid().unwrap().to_string());
        assert_eq!(row["owner"], "zklock (zklock)", "{row}");
        // The superuser sees the address too.
        let row = holders(&server.url());
        assert!(
            row["owner"]
                .as_str()
                .unwrap()
                .starts_with("zklock@127.0.0.1:"),
            "{row}"
        );
        guard.release().unwrap();
        client.close();
    }

    /// With the table `zklock_tokens` made as `docs/postgres.md` says, `holders` prints a
    /// holder's token once the holder has read it.
    #[test]
    fn holders_on_postgres_prints_a_holders_token_from_the_table_of_tokens() {
        let server = TestingPostgres::start().unwrap();
        let docs = include_str!("../docs/postgres.md");
        let section = docs.split("### Tokens in `holders`").nth(1).unwrap();
        let sql = section.split("```sql\n").nth(1).unwrap();
        server
            .sql("CREATE ROLE app LOGIN PASSWORD 'app'; CREATE ROLE ops LOGIN PASSWORD 'ops'")
            .unwrap();
        server.sql(sql.split("```").next().unwrap()).unwrap();
        let client = PgClient::connect(&server.url()).unwrap();
        let mutex = PgMutex::new(&client, "tokened").unwrap();
        let guard = mutex.lock().unwrap();
        let holder = || {
            let out = zklock_pg(&server, &["holders", "tokened", "--json"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            entries_of(&json(&out.stdout))[0].clone()
        };
        assert!(holder()["fencing_token"].is_null(), "not read yet");
        let token = guard.fencing_token();
        let row = holder();
        assert_eq!(row["fencing_token"], token, "{row}");
        assert_eq!(row["session"], mutex.backend_pid().unwrap().to_string());
        let table = zklock_pg(&server, &["holders", "tokened"])
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&table.stdout);
        assert!(
            table_rows(&table)[0].contains(&token.to_string()),
            "{table}"
        );
        guard.release().unwrap();
        client.close();
    }

    #[test]
    fn a_run_whose_backend_is_terminated_stops_its_command_with_123() {
        let server = TestingPostgres::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let never = scratch.file("never");
        let mut a = Proc::spawn(run_pg(
            &server,
            "lost",
            &["--kill-after", "2s"],
            &worker(&log, "a", Some(&never), 0),
        ));
        wait_for("a to hold", || entered(&log, "a"));
        let (held, _) = server.advisory_lock("lost").unwrap();
        assert!(server.terminate_backend(held[0]).unwrap());
        assert_eq!(a.code(), 123);
        assert!(read(&log).contains("term a"), "the command got SIGTERM");
    }

    #[test]
    fn elect_and_a_semaphore_on_postgres() {
        let server = TestingPostgres::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let never = scratch.file("never");
        let elect = |name: &str| {
            let mut c = zklock_pg(&server, &["elect", "leader", "--id", name, "--"]);
            c.args(worker(&log, name, Some(&never), 0));
            Proc::spawn(c)
        };
        let mut a = elect("a");
        wait_for("a to lead", || entered(&log, "a"));
        let mut b = elect("b");
        wait_for("b to queue", || {
            server.advisory_lock("leader").unwrap().1.len() == 1
        });
        assert!(!entered(&log, "b"));
        a.signal("TERM");
        assert_eq!(a.code(), 143, "the command's own status after SIGTERM");
        wait_for("b to lead", || entered(&log, "b"));
        assert!(token(&log, "b") > token(&log, "a"));
        b.signal("TERM");
        assert_eq!(b.code(), 143);

        // Two leases of two: a third run times out with 124; holders lists the leases.
        let go = scratch.file("go");
        let opts = ["--semaphore", "2"];
        let _c = Proc::spawn(run_pg(
            &server,
            "sem",
            &opts,
            &worker(&log, "c", Some(&go), 0),
        ));
        let _d = Proc::spawn(run_pg(
            &server,
            "sem",
            &opts,
            &worker(&log, "d", Some(&go), 0),
        ));
        wait_for("two to hold", || entered(&log, "c") && entered(&log, "d"));
        let mut e = Proc::spawn(run_pg(
            &server,
            "sem",
            &["--semaphore", "2", "--timeout", "300ms"],
            &worker(&log, "e", None, 0),
        ));
        assert_eq!(e.code(), 124);
        assert!(!entered(&log, "e"));
        let out = zklock_pg(&server, &["holders", "sem", "--max-leases", "2"])
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        let leases: Vec<_> = table_rows(&table)
            .into_iter()
            .filter(|row| row[1] == "lease" && row[2] == "yes")
            .map(|row| row.last().unwrap().clone())
            .collect();
        assert_eq!(leases.len(), 2, "{table}");
        assert!(leases[0].starts_with("lease 1, backend "), "{table}");
        assert!(leases[1].starts_with("lease 2, backend "), "{table}");
        fs::write(&go, "").unwrap();
    }

    #[test]
    fn bad_input_and_zookeeper_only_commands_say_so_on_postgres() {
        let server = TestingPostgres::start().unwrap();
        let out = zklock_pg(&server, &["revoke", "x"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "bad usage");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("ZooKeeper only"), "{err}");
        let wrong = server.url_as("zklock", "wrong", "postgres");
        let out = Command::new(ZKLOCK)
            .args(["--connect", &wrong, "holders", "x"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot connect to postgres://") && !err.contains("wrong"),
            "{err}"
        );
        let out = zklock_pg(&server, &["holders", ""]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("must not be empty"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn run_and_holders_over_tls() {
        let server = TestingPostgres::start_tls().unwrap();
        let scratch = Scratch::new();
        let (log, ca) = (scratch.file("log"), scratch.file("ca.pem"));
        fs::write(&ca, server.tls().unwrap().ca_pem()).unwrap();
        let url = server.url().replace("@127.0.0.1:", "@localhost:")
            + "?hostaddr=127.0.0.1&sslmode=verify-full";
        let mut c = Command::new(ZKLOCK);
        c.args(["--connect", &url, "--tls-ca"]).arg(&ca);
        c.args(["run", "tls", "--"])
            .args(worker(&log, "a", None, 0));
        assert_eq!(Proc::spawn(c).code(), 0);
        assert!(token(&log, "a") > 0);
        let out = Command::new(ZKLOCK)
            .args(["--connect", &url, "--tls-ca"])
            .arg(&ca)
            .args(["holders", "tls"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "holders reads through the Client's TLS: {err}"
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("no one holds or waits"),
            "{out:?}"
        );
    }
}

#[cfg(feature = "mysql")]
mod on_mariadb {
    use super::*;
    use zklock::testing::TestingMariaDb;

    fn zklock_my(server: &TestingMariaDb, args: &[&str]) -> Command {
        let mut c = Command::new(ZKLOCK);
        c.arg("--connect").arg(server.url()).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn run_my(server: &TestingMariaDb, name: &str, opts: &[&str], command: &[String]) -> Command {
        let mut c = zklock_my(server, &["run", name]);
        c.args(opts).arg("--").args(command);
        c
    }

    #[test]
    fn a_killed_run_takes_its_command_along_on_mariadb() {
        let server = TestingMariaDb::start().unwrap();
        a_killed_run_takes_its_command_along(&server.url(), 5);
    }

    #[test]
    fn elect_and_a_semaphore_on_mariadb() {
        let server = TestingMariaDb::start().unwrap();
        let scratch = Scratch::new();
        let log = scratch.file("log");
        let never = scratch.file("never");
        let elect = |name: &str| {
            let mut c = zklock_my(&server, &["elect", "leader", "--id", name, "--"]);
            c.args(worker(&log, name, Some(&never), 0));
            Proc::spawn(c)
        };
        let mut a = elect("a");
        wait_for("a to lead", || entered(&log, "a"));
        let mut b = elect("b");
        // Time to queue: b must not lead while a does.
        thread::sleep(Duration::from_millis(500));
        assert!(!entered(&log, "b"));
        a.signal("TERM");
        assert_eq!(a.code(), 143, "the command's own status after SIGTERM");
        wait_for("b to lead", || entered(&log, "b"));
        assert!(token(&log, "b") > token(&log, "a"));
        b.signal("TERM");
        assert_eq!(b.code(), 143);

        // Two leases of two: a third run times out with 124.
        let go = scratch.file("go");
        let opts = ["--semaphore", "2"];
        let _c = Proc::spawn(run_my(
            &server,
            "sem",
            &opts,
            &worker(&log, "c", Some(&go), 0),
        ));
        let _d = Proc::spawn(run_my(
            &server,
            "sem",
            &opts,
            &worker(&log, "d", Some(&go), 0),
        ));
        wait_for("two to hold", || entered(&log, "c") && entered(&log, "d"));
        let mut e = Proc::spawn(run_my(
            &server,
            "sem",
            &["--semaphore", "2", "--timeout", "300ms"],
            &worker(&log, "e", None, 0),
        ));
        assert_eq!(e.code(), 124);
        assert!(!entered(&log, "e"));
        // `holders` shows both leases without being told how many there are, each with the
        // token its command was given.
        let out = zklock_my(&server, &["holders", "sem"]).output().unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        let mut shown: Vec<String> = table_rows(&table)
            .into_iter()
            .filter(|row| row[1] == "lease" && row[2] == "yes")
            .map(|row| row[3].clone())
            .collect();
        shown.sort();
        let mut given = [token(&log, "c"), token(&log, "d")].map(|t| t.to_string());
        given.sort();
        assert_eq!(shown, given, "{table}");
        fs::write(&go, "").unwrap();
    }

    /// `?lock_mode=table` in the URL is the table mode for the command line too: `run`
    /// excludes (a second run times out with 124, then runs with a higher token), and
    /// `--semaphore` is refused with the mode's reason.
    #[test]
    fn run_in_the_table_mode_on_mariadb() {
        let server = TestingMariaDb::start().unwrap();
        let url = format!("{}?lock_mode=table", server.url());
        let scratch = Scratch::new();
        let (log, go) = (scratch.file("log"), scratch.file("go"));
        let run = |name: &str, opts: &[&str], go: Option<&Path>| {
            let mut c = Command::new(ZKLOCK);
            c.args(["--connect", &url, "run", "table-lock"]).args(opts);
            c.arg("--").args(worker(&log, name, go, 0));
            c.stdin(Stdio::null());
            Proc::spawn(c)
        };
        let mut a = run("a", &[], Some(&go));
        wait_for("a to hold", || entered(&log, "a"));
        let mut b = run("b", &["--timeout", "300ms"], None);
        assert_eq!(b.code(), 124);
        assert!(!entered(&log, "b"));
        fs::write(&go, "").unwrap();
        assert_eq!(a.code(), 0);
        let mut c = run("c", &[], None);
        assert_eq!(c.code(), 0);
        assert!(token(&log, "c") > token(&log, "a"));
        let out = Command::new(ZKLOCK)
            .args([
                "--connect",
                &url,
                "run",
                "sem",
                "--semaphore",
                "2",
                "--",
                "true",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("table mode"), "{err}");
    }

    #[test]
    fn holders_on_mariadb_shows_the_holding_connection() {
        let server = TestingMariaDb::start().unwrap();
        let out = zklock_my(&server, &["holders", "seen"]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("no one holds or waits"),
            "{out:?}"
        );
        let client = zklock::MySqlClient::connect(&server.url()).unwrap();
        let mutex = zklock::mysql::MySqlMutex::new(&client, "seen").unwrap();
        let guard = mutex.lock().unwrap();
        let out = zklock_my(&server, &["holders", "seen", "--json"])
            .output()
            .unwrap();
        let doc = json(&out.stdout);
        assert_eq!(doc["backend"], "mysql");
        let rows = entries_of(&doc);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["holds"], true);
        assert_eq!(
            rows[0]["session"],
            mutex.connection_id().unwrap().to_string()
        );
        // No token until the holder asks for one; then the one it was given (a mark of the
        // server's first second is not believed: asked for after it).
        assert_eq!(rows[0]["fencing_token"], serde_json::Value::Null);
        wait_for("the server's first seconds", || {
            let rows = server.root_sql("SHOW GLOBAL STATUS LIKE 'Uptime'").unwrap();
            rows[0][1].parse::<u64>().unwrap() >= 3
        });
        let token = guard.fencing_token();
        let out = zklock_my(&server, &["holders", "seen", "--json"])
            .output()
            .unwrap();
        assert_eq!(entries_of(&json(&out.stdout))[0]["fencing_token"], token);
        let out = zklock_my(&server, &["holders", "seen"]).output().unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        println!("{table}");
        assert!(
            table.lines().any(|l| l
                .contains(&format!("connection {}", mutex.connection_id().unwrap()))
                && l.split_whitespace().any(|w| w == token.to_string())),
            "{table}"
        );
        guard.release().unwrap();
        client.close();
    }

    #[test]
    fn bad_input_and_commands_not_built_say_so_on_mariadb() {
        let server = TestingMariaDb::start().unwrap();
        let out = zklock_my(&server, &["revoke", "x"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "bad usage");
        let wrong = server.url_as("zklock", "wrong", "zklock");
        let out = Command::new(ZKLOCK)
            .args(["--connect", &wrong, "run", "x", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains("cannot connect to ") && err.contains("Access denied"),
            "{err}"
        );
    }
}

/// `holders --json` parses with one schema on every backend, the lock taken through the
/// library's `zklock::connect` with the same name everywhere.
#[cfg(all(feature = "redis", feature = "postgres", feature = "mysql"))]
#[test]
fn holders_json_has_one_schema_on_every_backend() {
    use zklock::testing::{TestingMariaDb, TestingPostgres, TestingRedis};
    let zk = TestingServer::start().unwrap();
    let redis = TestingRedis::start().unwrap();
    let pg = TestingPostgres::start().unwrap();
    let my = TestingMariaDb::start().unwrap();
    let urls = [
        (format!("zk://{}", zk.connect_string()), "zookeeper"),
        (redis.url(), "redis"),
        (pg.url(), "postgres"),
        (my.url(), "mysql"),
    ];
    for (url, backend) in &urls {
        let locks = zklock::connect(url).unwrap();
        let mutex = locks.mutex("shared").unwrap();
        mutex.acquire().unwrap();
        let out = Command::new(ZKLOCK)
            .args(["--connect", url, "holders", "shared", "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: {err}");
        let doc = json(&out.stdout);
        assert_eq!(doc["backend"], *backend, "{doc}");
        let entries = entries_of(&doc);
        assert_eq!(entries.len(), 1, "{backend}: {doc}");
        assert_eq!(entries[0]["holds"], true, "{backend}: {doc}");
        assert_eq!(entries[0]["kind"], "lock", "{backend}: {doc}");
        mutex.release().unwrap();
        locks.close();
    }
}
