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
