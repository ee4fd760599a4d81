//! The MySQL backend's table mode in the tests that run against `TestingMariaDb`: a Client of
//! a server, and the enter/exit log of the critical sections.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use zklock::mysql::{MySqlMode, MySqlMutex};
use zklock::testing::TestingMariaDb;
use zklock::MySqlClient;

/// A table-mode Client of `server` with a session (the lease) of `session`.
pub fn client(server: &TestingMariaDb, session: Duration) -> MySqlClient {
    let client = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
        .session_timeout(session)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect("connect");
    assert_eq!(client.mode(), MySqlMode::Table);
    client
}

/// Enter/exit of each critical section, and the tokens in the order the sections ran.
#[derive(Default)]
pub struct Sections {
    inside: AtomicBool,
    overlaps: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
}

impl Sections {
    pub fn run(&self, token: u64) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.tokens.lock().push(token);
        thread::sleep(Duration::from_millis(2));
        self.inside.store(false, Ordering::SeqCst);
    }

    /// Two threads on each of `mutexes` run `each` sections apiece, each under a guard.
    pub fn each_twice(mutexes: &[MySqlMutex], each: usize) -> Sections {
        let log = Sections::default();
        thread::scope(|s| {
            for mutex in mutexes.iter().chain(mutexes) {
                let log = &log;
                s.spawn(move || {
                    for _ in 0..each {
                        let guard = mutex.lock().unwrap();
                        log.run(guard.fencing_token());
                        drop(guard);
                    }
                });
            }
        });
        log
    }

    /// No two sections overlapped, there were `sections`, and their tokens rose strictly.
    pub fn check(&self, sections: usize) {
        assert_eq!(
            self.overlaps.load(Ordering::SeqCst),
            0,
            "overlapping sections"
        );
        let tokens = self.tokens.lock();
        assert_eq!(tokens.len(), sections);
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "tokens not strictly rising: {tokens:?}"
        );
    }
}

/// `rounds` rounds in which every mutex of `contenders` tries once at the same moment (a try
/// without waiting) and the winner lets go only after every other has tried: exactly one wins
/// each round, with the token after the last one (`last` before the first round), and no try
/// fails. `before` runs before each round, with its number. The last token.
pub fn one_winner_per_round(
    contenders: &[MySqlMutex],
    mut last: u64,
    rounds: usize,
    mut before: impl FnMut(usize),
) -> u64 {
    let n = contenders.len();
    for round in 0..rounds {
        before(round);
        let (start, tried) = (Barrier::new(n), Barrier::new(n));
        let tries: Vec<zklock::Result<Option<u64>>> = thread::scope(|s| {
            let threads: Vec<_> = contenders
                .iter()
                .map(|mutex| {
                    let (start, tried) = (&start, &tried);
                    s.spawn(move || {
                        start.wait();
                        let got = mutex.acquire_timeout(Duration::ZERO);
                        let token = matches!(got, Ok(true)).then(|| mutex.fencing_token());
                        // Past the barrier even on an error, so that no thread waits for ever.
                        tried.wait();
                        if token.is_some() {
                            mutex.release().unwrap();
                        }
                        got.map(|_| token.flatten())
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let won: Vec<(usize, u64)> = tries
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                Ok(token) => token.map(|token| (i, token)),
                Err(e) => panic!("round {round}: contender {i} failed: {e}"),
            })
            .collect();
        assert_eq!(won.len(), 1, "round {round}: winners {won:?}");
        assert_eq!(won[0].1, last + 1, "round {round}");
        last = won[0].1;
    }
    last
}

/// Pairs of names that a collation, MariaDB's cut at a NUL byte or its limit in bytes would
/// make one lock, and the longest names: each pair must be two locks.
pub fn edge_names() -> Vec<(String, String)> {
    let grin = "\u{1F600}";
    vec![
        // MariaDB cuts a GET_LOCK name at its first NUL byte.
        ("a\0x".into(), "a\0y".into()),
        // Pad-space collations compare "x" and "x " equal.
        ("x".into(), "x ".into()),
        // GET_LOCK names are case-insensitive.
        ("Ledger".into(), "ledger".into()),
        // Accent-insensitive collations.
        ("é".into(), "e".into()),
        // 256 bytes in 64 four-byte characters: over MariaDB's limit in bytes.
        (grin.repeat(64), format!("{}\u{1F601}", grin.repeat(63))),
        // 192 and 196 bytes: MariaDB locks the first and refuses the second.
        (grin.repeat(48), grin.repeat(49)),
        // The longest names, differing in their last byte.
        ("n".repeat(1024), format!("{}m", "n".repeat(1023))),
        // A name that is the hash the other one is mapped to.
        (
            "Ledger".into(),
            "ee69eb4afc76aae085cdfb153ca55d587b819e19d84145b5438be7f2bc25ec83".into(),
        ),
    ]
}

/// For every pair of [`edge_names`]: the first name taken through `a` leaves the second free
/// through `b`, and excludes its own name through `b`. Every broken pair is named.
pub fn distinct_names_are_distinct_locks(a: &MySqlClient, b: &MySqlClient) {
    let mut broken = Vec::new();
    for (x, y) in edge_names() {
        let (short_x, short_y) = (shown(&x), shown(&y));
        let held = MySqlMutex::new(a, &x).unwrap();
        match held.acquire_timeout(super::patience()) {
            Ok(true) => {}
            other => {
                broken.push(format!("{short_x} cannot be taken: {other:?}"));
                continue;
            }
        }
        let same = MySqlMutex::new(b, &x).unwrap();
        if !matches!(same.acquire_timeout(Duration::ZERO), Ok(false)) {
            broken.push(format!("{short_x} does not exclude itself"));
        }
        let other = MySqlMutex::new(b, &y).unwrap();
        match other.acquire_timeout(Duration::ZERO) {
            Ok(true) => other.release().unwrap(),
            got => broken.push(format!(
                "{short_x} held, {short_y} is not free ({got:?}): one lock for two names"
            )),
        }
        held.release().unwrap();
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A name for a message: its first 16 characters and its length in bytes.
fn shown(name: &str) -> String {
    format!(
        "{:?} ({} bytes)",
        name.chars().take(16).collect::<String>(),
        name.len()
    )
}
