//! Cross-language interop for the read-write lock and the semaphore: Apache Curator's own
//! `InterProcessReadWriteLock` and `InterProcessSemaphoreV2`, run in separate JVMs by
//! `tests/java/CuratorRwSem.java`, and zklock's contend on the same paths of one real ZooKeeper.
//!
//! Every contender, in either language, appends `RENTER <name>` / `REXIT <name>` (read lock),
//! `WENTER` / `WEXIT` (write lock) or `SENTER` / `SEXIT` (a semaphore lease) to one shared log
//! file (append mode, one write a line) while it holds, so the log is the order of the holds: a
//! line written inside a hold is inside it. Meanwhile an observer session samples the nodes
//! under the path, with their owning session, to compare both sides' node names.
//!
//! Needs a JDK and Debian's Curator 5 jars, like `tests/interop.rs`:
//! `apt-get install libcurator-recipes-java default-jdk-headless` (plus `zookeeper` for the
//! server). Without them these tests fail, saying so. `ZKLOCK_CURATOR_CLASSPATH` replaces the
//! Debian jars; `JAVA_HOME` (or `JAVA` and `JAVAC`) picks the JDK.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::java::{
    append, eventually, is_java, join, read_log, wait_unwatched, Java, JavaProc, JavaProgram,
};
use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, Error, InterProcessReadWriteLock, InterProcessSemaphoreV2};

/// `tests/java/CuratorRwSem.java`.
const CURATOR_RW_SEM: JavaProgram = JavaProgram {
    class: "CuratorRwSem",
    recipes: "InterProcessReadWriteLock and InterProcessSemaphoreV2",
    scratch_prefix: "zklock-interop-rwsem-",
    stdout_tail: Some(40),
};

const SESSION: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// The Java side
// ---------------------------------------------------------------------------

impl Java {
    /// `rw-loop <connect> <path> <iterations> <holdMillis> <name> <sharedLog> <writePercent>`.
    fn rw_loop(
        &self,
        connect: &str,
        path: &str,
        iterations: u32,
        hold_ms: u64,
        name: &str,
        write_percent: u32,
    ) -> JavaProc {
        let log = self.log_arg();
        self.spawn(
            name,
            &[
                "rw-loop",
                connect,
                path,
                &iterations.to_string(),
                &hold_ms.to_string(),
                name,
                &log,
                &write_percent.to_string(),
            ],
        )
    }

    /// `sem-loop <connect> <path> <maxLeases> <iterations> <holdMillis> <name> <sharedLog>`.
    fn sem_loop(
        &self,
        connect: &str,
        path: &str,
        max_leases: u32,
        iterations: u32,
        hold_ms: u64,
        name: &str,
    ) -> JavaProc {
        let log = self.log_arg();
        self.spawn(
            name,
            &[
                "sem-loop",
                connect,
                path,
                &max_leases.to_string(),
                &iterations.to_string(),
                &hold_ms.to_string(),
                name,
                &log,
            ],
        )
    }
}

impl JavaProc {
    /// Waits for `READY <name> <sessionId>`; returns the session id.
    fn ready(&mut self) -> i64 {
        let line = self.expect_line("READY ");
        line.split(' ')
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad READY line {line:?}"))
    }

    /// `(tag, node)` of each `<tag> <name> <nanos> <node>` line printed, for tags ending in
    /// `ENTER` (`RENTER`, `WENTER`, `SENTER`).
    fn entered_nodes(&self) -> Vec<(String, String)> {
        self.seen
            .iter()
            .filter_map(|l| {
                let mut words = l.split(' ');
                let tag = words.next()?;
                if !tag.ends_with("ENTER") {
                    return None;
                }
                let node = words.nth(2).unwrap_or_else(|| panic!("bad line {l:?}"));
                Some((tag.to_owned(), node.to_owned()))
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// The Rust side
// ---------------------------------------------------------------------------

/// A finished zklock contender, kept open so that leftover watches can be looked for.
struct RustContender {
    client: Client,
    /// Its session (the same from start to end).
    session: i64,
    /// Its lease nodes (semaphore contenders only).
    nodes: Vec<String>,
}

fn session_of(client: &Client) -> i64 {
    client.session_id().expect("connected: a session id")
}

/// A thread with its own Client and read-write lock: `iterations` times take the write lock
/// with probability `write_percent` %, else the read lock, log ENTER, hold, log EXIT, release.
fn rust_rw_contender(
    connect: &str,
    path: &'static str,
    iterations: u32,
    hold: Duration,
    name: &str,
    log: PathBuf,
    write_percent: u32,
) -> (i64, JoinHandle<RustContender>) {
    let (connect, name) = (connect.to_owned(), name.to_owned());
    let client = client(&connect, SESSION);
    let session = session_of(&client);
    let handle = thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let rw = InterProcessReadWriteLock::new(&client, path).expect("rw lock");
            for i in 0..iterations {
                if fastrand::u32(0..100) < write_percent {
                    let guard = rw
                        .write_lock()
                        .lock()
                        .unwrap_or_else(|e| panic!("{name} write acquire #{i}: {e}"));
                    append(&log, &format!("WENTER {name}"));
                    thread::sleep(hold);
                    append(&log, &format!("WEXIT {name}"));
                    guard
                        .release()
                        .unwrap_or_else(|e| panic!("{name} write release #{i}: {e}"));
                } else {
                    let guard = rw
                        .read_lock()
                        .lock()
                        .unwrap_or_else(|e| panic!("{name} read acquire #{i}: {e}"));
                    append(&log, &format!("RENTER {name}"));
                    thread::sleep(hold);
                    append(&log, &format!("REXIT {name}"));
                    guard
                        .release()
                        .unwrap_or_else(|e| panic!("{name} read release #{i}: {e}"));
                }
            }
            assert_eq!(session_of(&client), session, "{name}: the session changed");
            RustContender {
                client,
                session,
                nodes: Vec::new(),
            }
        })
        .unwrap();
    (session, handle)
}

/// A thread with its own Client and semaphore: `iterations` times acquire one lease, log ENTER,
/// hold, log EXIT, return it.
fn rust_sem_contender(
    connect: &str,
    path: &'static str,
    max_leases: u32,
    iterations: u32,
    hold: Duration,
    name: &str,
    log: PathBuf,
) -> (i64, JoinHandle<RustContender>) {
    let (connect, name) = (connect.to_owned(), name.to_owned());
    let client = client(&connect, SESSION);
    let session = session_of(&client);
    let handle = thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let semaphore =
                InterProcessSemaphoreV2::new(&client, path, max_leases).expect("semaphore");
            let mut nodes = Vec::new();
            for i in 0..iterations {
                let lease = semaphore
                    .acquire()
                    .unwrap_or_else(|e| panic!("{name} acquire #{i}: {e}"));
                append(&log, &format!("SENTER {name}"));
                nodes.push(lease.path().to_owned());
                thread::sleep(hold);
                append(&log, &format!("SEXIT {name}"));
                lease
                    .return_lease()
                    .unwrap_or_else(|e| panic!("{name} return #{i}: {e}"));
            }
            assert_eq!(session_of(&client), session, "{name}: the session changed");
            RustContender {
                client,
                session,
                nodes,
            }
        })
        .unwrap();
    (session, handle)
}

// ---------------------------------------------------------------------------
// Observing the nodes
// ---------------------------------------------------------------------------

/// What the sampler saw.
#[derive(Debug, Default)]
struct Samples {
    /// Every node seen under the sampled parents (full path) → its owning session.
    owners: BTreeMap<String, i64>,
    /// Per parent, the most children seen in one listing.
    max_children: BTreeMap<String, usize>,
    rounds: usize,
}

/// An observer thread listing `parents` (and each child's owner) again and again until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Samples>,
}

impl Sampler {
    fn start(client: Client, parents: Vec<String>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::Builder::new()
            .name("sampler".into())
            .spawn(move || {
                let mut samples = Samples::default();
                while !flag.load(Ordering::SeqCst) {
                    for parent in &parents {
                        let children = match client.children(parent) {
                            Ok(c) => c,
                            Err(Error::NoNode(_)) => continue,
                            Err(e) => panic!("sampler: listing {parent}: {e}"),
                        };
                        let max = samples.max_children.entry(parent.clone()).or_default();
                        *max = (*max).max(children.len());
                        for child in children {
                            let full = format!("{parent}/{child}");
                            if samples.owners.contains_key(&full) {
                                continue;
                            }
                            match client.data(&full) {
                                Ok((_, stat)) => {
                                    samples.owners.insert(full, stat.ephemeral_owner);
                                }
                                Err(Error::NoNode(_)) => {} // gone already
                                Err(e) => panic!("sampler: reading {full}: {e}"),
                            }
                        }
                    }
                    samples.rounds += 1;
                    thread::sleep(Duration::from_millis(1));
                }
                samples
            })
            .unwrap();
        Sampler { stop, handle }
    }

    fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        join(self.handle)
    }
}

/// Checks Curator's protected node name `<parent>/_c_<uuid><marker><10 digits>` (`marker` is
/// `-__READ__`, `-__WRIT__`, `-lease-` or `-lock-`); returns the sequence number, or why not.
fn curator_node(parent: &str, node: &str, marker: &str) -> Result<u64, String> {
    let name = node
        .strip_prefix(parent)
        .and_then(|n| n.strip_prefix('/'))
        .ok_or_else(|| format!("{node} is not a child of {parent}"))?;
    let bad = |why: &str| format!("{node}: not Curator's `_c_<uuid>{marker}<seq>` ({why})");
    let rest = name
        .strip_prefix("_c_")
        .ok_or_else(|| bad("no _c_ prefix"))?;
    if rest.len() != 36 + marker.len() + 10 {
        return Err(bad("wrong length"));
    }
    let (uuid, rest) = rest.split_at(36);
    match uuid::Uuid::parse_str(uuid) {
        Ok(u) if u.hyphenated().to_string() == uuid => {}
        _ => return Err(bad("not a lowercase hyphenated UUID")),
    }
    let seq = rest
        .strip_prefix(marker)
        .ok_or_else(|| bad("wrong marker after the UUID"))?;
    if !seq.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("sequence is not 10 digits"));
    }
    Ok(seq.parse().unwrap())
}

/// Which of `markers` the node carries (checking the whole name); panics if none fits.
fn node_kind<'m>(parent: &str, node: &str, markers: &[&'m str]) -> &'m str {
    let mut why = Vec::new();
    for m in markers {
        match curator_node(parent, node, m) {
            Ok(_) => return m,
            Err(e) => why.push(e),
        }
    }
    panic!("{}", why.join("; "))
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// The number of children of `parent` (0 if it does not exist).
fn child_count(client: &Client, parent: &str) -> usize {
    match client.children(parent) {
        Ok(c) => c.len(),
        Err(Error::NoNode(_)) => 0,
        Err(e) => panic!("listing {parent}: {e}"),
    }
}

/// Ephemeral nodes at or under `path`, depth first.
fn ephemerals_under(client: &Client, path: &str) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    match client.exists(path) {
        Ok(None) | Err(Error::NoNode(_)) => return Ok(found),
        Ok(Some(stat)) if stat.ephemeral_owner != 0 => found.push(path.to_owned()),
        Ok(Some(_)) => {}
        Err(e) => return Err(e.to_string()),
    }
    let children = match client.children(path) {
        Ok(c) => c,
        Err(Error::NoNode(_)) => return Ok(found),
        Err(e) => return Err(e.to_string()),
    };
    for child in children {
        found.extend(ephemerals_under(client, &format!("{path}/{child}"))?);
    }
    Ok(found)
}

/// After a scenario: no ephemeral node left at or under `path`, and no watch left on it or
/// under it.
fn assert_clean(server: &TestingServer, client: &Client, path: &str) {
    eventually(&format!("no ephemeral node under {path}"), || {
        let left = ephemerals_under(client, path)?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left: {left:?}"))
        }
    });
    wait_unwatched(server, &format!("no watch left under {path}"), path);
}

/// The log lines around 1-based `line`, numbered, for failure messages.
fn excerpt(text: &str, line: usize) -> String {
    let from = line.saturating_sub(25).max(1);
    text.lines()
        .enumerate()
        .skip(from - 1)
        .take(line + 5 - from + 1)
        .map(|(i, l)| {
            let mark = if i + 1 == line { ">>" } else { "  " };
            format!("{mark}{:5} {l}", i + 1)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line of the shared log as a `(tag, name)` pair, or `None` (a bad line).
fn tag_and_name(tag: &str, name: &str) -> Option<(String, String)> {
    (!name.is_empty() && !name.contains(' ')).then(|| (tag.to_owned(), name.to_owned()))
}

#[derive(Debug, Default)]
struct RwStats {
    /// (reads, writes) per contender.
    holds: BTreeMap<String, (usize, usize)>,
    max_readers: usize,
    /// RENTERs while a reader of the other language was inside.
    cross_language_reads: usize,
    /// RENTERs while another reader (any language) was inside.
    shared_reads: usize,
    /// Times the lock passed from a holder of one language to one of the other.
    switches: usize,
}

/// Asserts read-write exclusion on the log: a writer enters only when nobody is inside, and
/// nobody enters while a writer is inside; every EXIT closes its own ENTER.
fn check_rw_log(log: &Path) -> RwStats {
    let (text, events) = read_log(log, tag_and_name);
    let mut inside: Vec<(String, bool)> = Vec::new(); // (name, writing)
    let mut stats = RwStats::default();
    let mut last_java: Option<bool> = None;
    for (i, (tag, name)) in events.iter().enumerate() {
        let line = i + 1;
        let fail = |why: String| -> ! {
            panic!(
                "{why} (line {line} of {}):\n{}",
                log.display(),
                excerpt(&text, line)
            )
        };
        match tag.as_str() {
            "RENTER" | "WENTER" => {
                let writing = tag == "WENTER";
                if let Some((w, _)) = inside.iter().find(|(_, w)| *w) {
                    fail(format!(
                        "EXCLUSION VIOLATED: {name} entered while writer {w} held"
                    ));
                }
                if writing && !inside.is_empty() {
                    let names: Vec<&str> = inside.iter().map(|(n, _)| n.as_str()).collect();
                    fail(format!(
                        "EXCLUSION VIOLATED: writer {name} entered while readers {names:?} held"
                    ));
                }
                if inside.iter().any(|(n, _)| n == name) {
                    fail(format!("{name} entered twice"));
                }
                if !writing && !inside.is_empty() {
                    stats.shared_reads += 1;
                    if inside.iter().any(|(n, _)| is_java(n) != is_java(name)) {
                        stats.cross_language_reads += 1;
                    }
                }
                if last_java.is_some_and(|j| j != is_java(name)) {
                    stats.switches += 1;
                }
                last_java = Some(is_java(name));
                inside.push((name.clone(), writing));
                let h = stats.holds.entry(name.clone()).or_default();
                if writing {
                    h.1 += 1;
                } else {
                    h.0 += 1;
                    stats.max_readers = stats.max_readers.max(inside.len());
                }
            }
            "REXIT" | "WEXIT" => {
                let writing = tag == "WEXIT";
                match inside.iter().position(|(n, w)| n == name && *w == writing) {
                    Some(p) => {
                        inside.remove(p);
                    }
                    None => fail(format!(
                        "{tag} {name} without its ENTER; inside: {inside:?}"
                    )),
                }
            }
            _ => fail(format!("unexpected tag {tag:?}")),
        }
    }
    assert!(
        inside.is_empty(),
        "the log ends inside {inside:?}'s hold:\n{text}"
    );
    stats
}

#[derive(Debug, Default)]
struct SemStats {
    holds: BTreeMap<String, usize>,
    max_holders: usize,
    /// SENTERs that made the holders number `max_leases`.
    full: usize,
    /// SENTERs while a contender of the other language held a lease.
    cross_language: usize,
}

/// Asserts on the log that at most `max_leases` contenders hold a lease at once.
fn check_sem_log(log: &Path, max_leases: usize) -> SemStats {
    let (text, events) = read_log(log, tag_and_name);
    let mut inside: Vec<String> = Vec::new();
    let mut stats = SemStats::default();
    for (i, (tag, name)) in events.iter().enumerate() {
        let line = i + 1;
        let fail = |why: String| -> ! {
            panic!(
                "{why} (line {line} of {}):\n{}",
                log.display(),
                excerpt(&text, line)
            )
        };
        match tag.as_str() {
            "SENTER" => {
                if inside.contains(name) {
                    fail(format!("{name} entered twice"));
                }
                if inside.iter().any(|n| is_java(n) != is_java(name)) {
                    stats.cross_language += 1;
                }
                inside.push(name.clone());
                if inside.len() > max_leases {
                    fail(format!(
                        "OVERCOMMITTED: {} holders {inside:?} of {max_leases} leases",
                        inside.len()
                    ));
                }
                if inside.len() == max_leases {
                    stats.full += 1;
                }
                stats.max_holders = stats.max_holders.max(inside.len());
                *stats.holds.entry(name.clone()).or_default() += 1;
            }
            "SEXIT" => match inside.iter().position(|n| n == name) {
                Some(p) => {
                    inside.remove(p);
                }
                None => fail(format!(
                    "SEXIT {name} without its SENTER; inside: {inside:?}"
                )),
            },
            _ => fail(format!("unexpected tag {tag:?}")),
        }
    }
    assert!(
        inside.is_empty(),
        "the log ends inside {inside:?}'s holds:\n{text}"
    );
    stats
}

/// Names the owner of each sampled node (`owner session → contender`), panicking on a node of
/// an unknown session; returns contender → kinds (by marker) of its nodes seen.
fn classify(
    samples: &Samples,
    parent: &str,
    markers: &[&'static str],
    sessions: &BTreeMap<i64, String>,
) -> BTreeMap<String, BTreeMap<&'static str, usize>> {
    let mut out: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
    let prefix = format!("{parent}/");
    for (node, owner) in &samples.owners {
        if !node.starts_with(&prefix) {
            continue;
        }
        let who = sessions.get(owner).unwrap_or_else(|| {
            panic!("{node} is owned by session {owner:#x}, no contender's ({sessions:?})")
        });
        let kind = node_kind(parent, node, markers);
        *out.entry(who.clone()).or_default().entry(kind).or_default() += 1;
    }
    out
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// 2 Curator JVMs and 2 zklock contenders (own Client each) loop on one read-write lock (30 %
/// writes): a writer is never inside with anyone, readers of both languages share the lock, and
/// both sides' nodes are Curator's `_c_<uuid>-__READ__<seq>` / `_c_<uuid>-__WRIT__<seq>`.
#[test]
fn curator_and_zklock_read_write_locks_share_one_path() {
    const PATH: &str = "/interop/rw";
    const ITERATIONS: u32 = 40;
    const HOLD_MS: u64 = 3;
    const WRITE_PERCENT: u32 = 30;
    const MARKERS: [&str; 2] = ["-__READ__", "-__WRIT__"];
    init_logging();
    let java = Java::compile(&CURATOR_RW_SEM);
    let server = TestingServer::start().expect("ZooKeeper starts");
    let connect = server.connect_string();
    let started = Instant::now();

    // A zklock writer holds the lock until all four contenders are queued.
    let observer = client(&connect, SESSION);
    let gate_lock = InterProcessReadWriteLock::new(&observer, PATH).unwrap();
    let gate = gate_lock.write_lock().lock().unwrap();
    let sampler = Sampler::start(observer.clone(), vec![PATH.to_owned()]);
    let mut sessions: BTreeMap<i64, String> = BTreeMap::new();
    sessions.insert(session_of(&observer), "gate".into());

    let mut javas: Vec<JavaProc> = ["J1", "J2"]
        .iter()
        .map(|name| java.rw_loop(&connect, PATH, ITERATIONS, HOLD_MS, name, WRITE_PERCENT))
        .collect();
    let mut rusts = Vec::new();
    for name in ["R1", "R2"] {
        let hold = Duration::from_millis(HOLD_MS);
        let (session, handle) = rust_rw_contender(
            &connect,
            PATH,
            ITERATIONS,
            hold,
            name,
            java.log(),
            WRITE_PERCENT,
        );
        sessions.insert(session, name.into());
        rusts.push(handle);
    }
    for j in &mut javas {
        let session = j.ready();
        sessions.insert(session, j.name.clone());
    }
    assert_eq!(sessions.len(), 5, "sessions not distinct: {sessions:?}");
    eventually("4 contenders queued behind the gate", || {
        javas.iter_mut().for_each(JavaProc::assert_running);
        for r in &rusts {
            assert!(!r.is_finished(), "{:?} ended early", r.thread().name());
        }
        match child_count(&observer, PATH) {
            n if n >= 5 => Ok(()),
            n => Err(format!("{n} nodes")),
        }
    });
    gate.release().unwrap();

    let java_nodes: Vec<(String, Vec<(String, String)>)> = javas
        .iter_mut()
        .map(|j| {
            j.finish();
            (j.name.clone(), j.entered_nodes())
        })
        .collect();
    let rusts: Vec<RustContender> = rusts.into_iter().map(join).collect();
    let samples = sampler.finish();

    // Exclusion, and readers of both languages inside together.
    let stats = check_rw_log(&java.log());
    for name in ["J1", "J2", "R1", "R2"] {
        let (r, w) = stats.holds.get(name).copied().unwrap_or_default();
        assert_eq!(
            r + w,
            ITERATIONS as usize,
            "{name} held {r} reads + {w} writes"
        );
    }
    assert!(
        stats.shared_reads > 0,
        "readers never held the lock together: {stats:?}"
    );
    assert!(
        stats.cross_language_reads > 0,
        "Curator and zklock readers never held the lock together: {stats:?}"
    );

    // What Curator says its own nodes are.
    for (name, nodes) in &java_nodes {
        assert_eq!(nodes.len(), ITERATIONS as usize, "{name} printed {nodes:?}");
        for (tag, node) in nodes {
            let marker = if tag == "WENTER" {
                MARKERS[1]
            } else {
                MARKERS[0]
            };
            if let Err(why) = curator_node(PATH, node, marker) {
                panic!("{name}'s {tag} node from Curator's getLockPath(): {why}");
            }
            if let Some(owner) = samples.owners.get(node) {
                assert_eq!(sessions.get(owner), Some(name), "{node}'s owner");
            }
        }
    }
    // Every node seen under the path, by owner: both languages' readers and writers.
    let kinds = classify(&samples, PATH, &MARKERS, &sessions);
    for language in ["J", "R"] {
        for marker in MARKERS {
            let seen: usize = kinds
                .iter()
                .filter(|(who, _)| who.starts_with(language))
                .filter_map(|(_, k)| k.get(marker))
                .sum();
            assert!(
                seen > 0,
                "no {marker} node of a {} contender seen (sampled {} rounds): {kinds:?}",
                if language == "J" { "Curator" } else { "zklock" },
                samples.rounds
            );
        }
    }
    assert_eq!(
        kinds.get("gate").and_then(|k| k.get(MARKERS[1])),
        Some(&1),
        "the gate's write node: {kinds:?}"
    );

    assert_clean(&server, &observer, PATH);
    eprintln!(
        "read-write: {} holds (reads, writes) {:?}; {} reads shared the lock, {} of them with a \
         reader of the other language; at most {} readers at once; {} hand-overs between \
         languages; nodes seen by owner {:?} (max {} at once, {} samples); in {:?}",
        stats.holds.values().map(|(r, w)| r + w).sum::<usize>(),
        stats.holds,
        stats.shared_reads,
        stats.cross_language_reads,
        stats.max_readers,
        stats.switches,
        kinds,
        samples.max_children.get(PATH).copied().unwrap_or_default(),
        samples.rounds,
        started.elapsed()
    );
    for r in &rusts {
        assert!(sessions.contains_key(&r.session));
        r.client.close();
    }
    observer.close();
}

/// 2 Curator JVMs and 2 zklock contenders loop on one semaphore of 3 leases: never more than
/// 3 holders, 3 reached; both sides use `<path>/locks` (`_c_<uuid>-lock-<seq>`) and
/// `<path>/leases` (`_c_<uuid>-lease-<seq>`).
#[test]
fn curator_and_zklock_semaphores_share_the_leases() {
    const PATH: &str = "/interop/semaphore";
    const LEASES: &str = "/interop/semaphore/leases";
    const LOCKS: &str = "/interop/semaphore/locks";
    const MAX_LEASES: u32 = 3;
    const ITERATIONS: u32 = 30;
    // Acquisitions are serialised by the internal lock (`locks/`), a few round trips and a
    // hand-over each (Curator's as zklock's); with holds of a few milliseconds a lease is
    // usually back before the next acquirer gets one, and the limit is never approached.
    const HOLD_MS: u64 = 50;
    init_logging();
    let java = Java::compile(&CURATOR_RW_SEM);
    let server = TestingServer::start().expect("ZooKeeper starts");
    let connect = server.connect_string();
    let started = Instant::now();

    // A zklock holder of all three leases until all four contenders are queued: one waits
    // for a lease holding the internal lock, three wait for the internal lock.
    let observer = client(&connect, SESSION);
    let gate_semaphore = InterProcessSemaphoreV2::new(&observer, PATH, MAX_LEASES).unwrap();
    let gate = gate_semaphore.acquire_many(MAX_LEASES).unwrap();
    for lease in &gate {
        curator_node(LEASES, lease.path(), "-lease-").unwrap();
    }
    let sampler = Sampler::start(observer.clone(), vec![LEASES.to_owned(), LOCKS.to_owned()]);
    let mut sessions: BTreeMap<i64, String> = BTreeMap::new();
    sessions.insert(session_of(&observer), "gate".into());

    let mut javas: Vec<JavaProc> = ["J1", "J2"]
        .iter()
        .map(|name| java.sem_loop(&connect, PATH, MAX_LEASES, ITERATIONS, HOLD_MS, name))
        .collect();
    let mut rusts = Vec::new();
    for name in ["R1", "R2"] {
        let hold = Duration::from_millis(HOLD_MS);
        let (session, handle) = rust_sem_contender(
            &connect,
            PATH,
            MAX_LEASES,
            ITERATIONS,
            hold,
            name,
            java.log(),
        );
        sessions.insert(session, name.into());
        rusts.push(handle);
    }
    for j in &mut javas {
        let session = j.ready();
        sessions.insert(session, j.name.clone());
    }
    assert_eq!(sessions.len(), 5, "sessions not distinct: {sessions:?}");
    eventually("4 contenders queued behind the gate", || {
        javas.iter_mut().for_each(JavaProc::assert_running);
        for r in &rusts {
            assert!(!r.is_finished(), "{:?} ended early", r.thread().name());
        }
        let (locks, leases) = (
            child_count(&observer, LOCKS),
            child_count(&observer, LEASES),
        );
        if locks >= 4 && leases > MAX_LEASES as usize {
            Ok(())
        } else {
            Err(format!("{locks} lock nodes, {leases} lease nodes"))
        }
    });
    gate_semaphore.return_all(gate).unwrap();

    let java_nodes: Vec<(String, Vec<(String, String)>)> = javas
        .iter_mut()
        .map(|j| {
            j.finish();
            (j.name.clone(), j.entered_nodes())
        })
        .collect();
    let rusts: Vec<RustContender> = rusts.into_iter().map(join).collect();
    let samples = sampler.finish();

    let stats = check_sem_log(&java.log(), MAX_LEASES as usize);
    for name in ["J1", "J2", "R1", "R2"] {
        let holds = stats.holds.get(name).copied().unwrap_or_default();
        assert_eq!(holds, ITERATIONS as usize, "{name} held {holds} leases");
    }
    assert_eq!(
        stats.max_holders, MAX_LEASES as usize,
        "never {MAX_LEASES} holders at once: {stats:?}"
    );

    // The lease nodes each side says it held.
    for (name, nodes) in &java_nodes {
        assert_eq!(nodes.len(), ITERATIONS as usize, "{name} printed {nodes:?}");
        for (_, node) in nodes {
            // getNodeName() is the name alone, without the parent.
            let node = format!("{LEASES}/{node}");
            if let Err(why) = curator_node(LEASES, &node, "-lease-") {
                panic!("{name}'s lease from Curator's Lease.getNodeName(): {why}");
            }
        }
    }
    for (r, name) in rusts.iter().zip(["R1", "R2"]) {
        assert_eq!(r.nodes.len(), ITERATIONS as usize);
        for node in &r.nodes {
            if let Err(why) = curator_node(LEASES, node, "-lease-") {
                panic!("{name}'s zklock lease: {why}");
            }
        }
    }
    // Every node seen under leases/ and locks/, by owner.
    let leases = classify(&samples, LEASES, &["-lease-"], &sessions);
    let locks = classify(&samples, LOCKS, &["-lock-"], &sessions);
    for (what, kinds) in [("lease", &leases), ("internal lock", &locks)] {
        for language in ["J", "R"] {
            assert!(
                kinds.keys().any(|who| who.starts_with(language)),
                "no {what} node of a {} contender seen (sampled {} rounds): {kinds:?}",
                if language == "J" { "Curator" } else { "zklock" },
                samples.rounds
            );
        }
    }
    // At most the holders plus the one acquirer holding the internal lock.
    let max_lease_nodes = samples.max_children.get(LEASES).copied().unwrap_or(0);
    assert!(
        max_lease_nodes <= MAX_LEASES as usize + 1,
        "{max_lease_nodes} lease nodes at once"
    );

    assert_clean(&server, &observer, PATH);
    eprintln!(
        "semaphore: holds {:?}; at most {} holders, {} times all {MAX_LEASES} leases held, {} \
         acquisitions while the other language held a lease; lease nodes by owner {leases:?}, \
         internal lock nodes by owner {locks:?} (max {} lease / {} lock nodes at once, {} \
         samples); in {:?}",
        stats.holds,
        stats.max_holders,
        stats.full,
        stats.cross_language,
        max_lease_nodes,
        samples.max_children.get(LOCKS).copied().unwrap_or(0),
        samples.rounds,
        started.elapsed()
    );
    for r in &rusts {
        assert!(sessions.contains_key(&r.session));
        r.client.close();
    }
    observer.close();
}

/// The read-write check itself: a reader entering inside a write is caught.
#[test]
#[should_panic(expected = "EXCLUSION VIOLATED: R1 entered while writer J1 held")]
fn the_rw_check_catches_a_reader_inside_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared.log");
    for line in [
        "RENTER R1",
        "RENTER J2",
        "REXIT R1",
        "REXIT J2",
        "WENTER J1",
        "RENTER R1",
        "REXIT R1",
        "WEXIT J1",
    ] {
        append(&log, line);
    }
    check_rw_log(&log);
}

/// The read-write check itself: a writer entering among readers is caught.
#[test]
#[should_panic(expected = "EXCLUSION VIOLATED: writer R2 entered while readers [\"J1\"] held")]
fn the_rw_check_catches_a_write_among_readers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared.log");
    for line in ["RENTER J1", "WENTER R2", "WEXIT R2", "REXIT J1"] {
        append(&log, line);
    }
    check_rw_log(&log);
}

/// The semaphore check itself: a fourth holder of three leases is caught.
#[test]
#[should_panic(expected = "OVERCOMMITTED: 4 holders")]
fn the_semaphore_check_catches_a_fourth_holder() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared.log");
    for line in [
        "SENTER J1",
        "SENTER R1",
        "SENTER J2",
        "SEXIT R1",
        "SENTER R2",
        "SENTER R1",
        "SEXIT J1",
        "SEXIT J2",
        "SEXIT R1",
        "SEXIT R2",
    ] {
        append(&log, line);
    }
    check_sem_log(&log, 3);
}
