//! The layers, checked on the source text:
//!
//! * the backend-neutral core (`src/core/`) knows no backend;
//! * no backend's module imports another backend's;
//! * the ZooKeeper Client (`src/zookeeper/client/`) offers mechanism — calls, spawning, code to
//!   run when a watch fires — and knows nothing of locks: it neither imports the lock recipes or
//!   leader election nor speaks their vocabulary (holders, marks, claims, waiters, keepers, lock
//!   health). The lock protocol lives in `src/zookeeper/locks/`.
//!
//! Each check is a function over a directory, so that a test can plant an offence in a scratch
//! directory and see the check catch it.

use std::fs;
use std::path::{Path, PathBuf};

/// Words of the lock layer. Identifiers are split into words (`mark_holder` → mark, holder;
/// `LockHealth` → lock, health) and compared in lower case, comments included.
const LOCK_WORDS: &[&str] = &[
    "mark",
    "marks",
    "marked",
    "marking",
    "claim",
    "claims",
    "claimed",
    "holder",
    "holders",
    "waiter",
    "waiters",
    "keeper",
    "keepers",
    "primed",
    "predecessor",
];

/// Whole phrases of the lock layer (checked in the text as written).
const LOCK_PHRASES: &[&str] = &[
    "LockHealth",
    "trait Store",
    "crate::zookeeper::locks",
    "crate::zookeeper::leader",
];

/// Every backend: its module under `src/` (and its feature). A new backend adds its name here.
const BACKENDS: &[&str] = &["zookeeper", "redis", "postgres", "mysql", "mem", "file"];

/// What the core must not use: a backend's client or module — `crate::<backend>` and
/// `<backend>::` for each of [`BACKENDS`], and the ZooKeeper wire client. (Its docs may name a
/// backend as an example, and the error enum keeps the ZooKeeper backend's catch-all variant.)
fn backend_phrases() -> Vec<String> {
    let mut out = vec!["zookeeper_client".to_owned(), "zk::".to_owned()];
    for b in BACKENDS {
        out.push(format!("crate::{b}"));
        out.push(format!("{b}::"));
    }
    out
}

fn src(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir)
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The words of a line: split at everything but letters and digits, and at camel-case humps
/// ("ZooKeeper" is one word).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let line = line.replace("ZooKeeper", "Zookeeper");
    for token in line.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut word = String::new();
        let mut prev_lower = false;
        for c in token.chars() {
            if c.is_ascii_uppercase() && prev_lower && !word.is_empty() {
                out.push(std::mem::take(&mut word).to_ascii_lowercase());
            }
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
            word.push(c);
        }
        if !word.is_empty() {
            out.push(word.to_ascii_lowercase());
        }
    }
    out
}

/// `file:line: text` for every line under `dir` with one of `phrases` or `words_of`.
fn offences(dir: &Path, phrases: &[&str], words_of: &[&str]) -> Vec<String> {
    let files = rust_files(dir);
    assert!(!files.is_empty(), "no source under {}", dir.display());
    let mut out = Vec::new();
    for path in files {
        let text = fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let phrase = phrases.iter().find(|p| line.contains(*p)).copied();
            let word = words(line)
                .into_iter()
                .find(|w| words_of.contains(&w.as_str()));
            if let Some(what) = phrase.map(str::to_owned).or(word) {
                out.push(format!(
                    "{}:{}: {what:?} in {}",
                    path.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    out
}

fn client_offences(dir: &Path) -> Vec<String> {
    offences(dir, LOCK_PHRASES, LOCK_WORDS)
}

fn core_offences(dir: &Path) -> Vec<String> {
    let phrases = backend_phrases();
    offences(
        dir,
        &phrases.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    )
}

/// What backend `name`'s module names of the other backends' modules.
fn backend_offences(dir: &Path, name: &str) -> Vec<String> {
    let others: Vec<String> = BACKENDS
        .iter()
        .filter(|b| **b != name)
        .map(|b| format!("crate::{b}"))
        .collect();
    offences(
        dir,
        &others.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    )
}

#[test]
fn the_client_knows_nothing_of_locks() {
    let found = client_offences(&src("zookeeper/client"));
    assert!(
        found.is_empty(),
        "lock knowledge in the Client layer:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_core_knows_no_backend() {
    let found = core_offences(&src("core"));
    assert!(
        found.is_empty(),
        "the core names a backend:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_backend_imports_another() {
    let found: Vec<String> = BACKENDS
        .iter()
        .flat_map(|b| backend_offences(&src(b), b))
        .collect();
    assert!(
        found.is_empty(),
        "a backend names another:\n{}",
        found.join("\n")
    );
}

/// The checks can fail: a planted lock word, lock phrase or backend name is caught, and a
/// clean file is not.
#[test]
fn the_checks_catch_a_planted_offence() {
    let dir = std::env::temp_dir().join(format!("zklock-layering-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let plant = |text: &str| fs::write(dir.join("planted.rs"), text).unwrap();

    plant("pub(crate) fn send(&self) -> Signal { self.call() }\n");
    assert!(client_offences(&dir).is_empty(), "a clean file was flagged");
    assert!(core_offences(&dir).is_empty(), "a clean file was flagged");

    for planted in [
        "fn mark_holder(&self) {}",
        "// wakes the waiter",
        "let h: LockHealth = x;",
        "pub(crate) trait Store {}",
        "use crate::zookeeper::locks::Acquired;",
        "struct KeeperGuard;",
    ] {
        plant(planted);
        assert_eq!(client_offences(&dir).len(), 1, "{planted:?} not caught");
    }
    for planted in [
        "use zookeeper_client as zk;",
        "let s = zk::Stat::default();",
        "use crate::mysql::MySqlClient;",
        "let c: redis::RedisClient;",
    ] {
        plant(planted);
        assert_eq!(core_offences(&dir).len(), 1, "{planted:?} not caught");
    }
    plant("use crate::postgres::PgClient;");
    assert_eq!(backend_offences(&dir, "redis").len(), 1, "not caught");
    assert!(
        backend_offences(&dir, "postgres").is_empty(),
        "its own module flagged"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn words_split_identifiers_and_humps() {
    assert_eq!(words("mark_holder"), ["mark", "holder"]);
    assert_eq!(words("LockHealth::Held"), ["lock", "health", "held"]);
    assert_eq!(words("set_closed(x2)"), ["set", "closed", "x2"]);
    assert_eq!(words("ZooKeeper's"), ["zookeeper", "s"]);
}
