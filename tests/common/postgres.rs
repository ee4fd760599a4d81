//! A PostgreSQL Client for the tests that run against `TestingPostgres`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::patience;

use zklock::testing::TestingPostgres;
use zklock::{PgClient, RetryForever};

/// A Client of `server` that retries for ever (a test's own deadlines bound it).
pub fn client(server: &TestingPostgres) -> PgClient {
    PgClient::builder(&server.url())
        .retry_policy(RetryForever::new(Duration::from_millis(100)).unwrap())
        .connect()
        .expect("connect")
}

/// In a worker process started with the server's URL in the environment variable `var`, a
/// Client with the session timeout `session`; `None` when this is not such a process.
pub fn worker_client(var: &str, session: Duration) -> Option<PgClient> {
    let url = std::env::var(var).ok()?;
    Some(
        PgClient::builder(&url)
            .session_timeout(session)
            .connect()
            .expect("connect"),
    )
}

/// An interactive `psql` session of the superuser, fed statements on its standard input: it
/// answers in about a millisecond, where `TestingPostgres::sql` opens a connection each time.
pub struct Psql {
    pub child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Psql {
    pub fn start(server: &TestingPostgres) -> Psql {
        let mut child = Command::new("psql")
            .args([&server.url(), "-tA", "-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql (Debian's postgresql-client) runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Psql {
            child,
            stdin,
            lines,
        }
    }

    /// The lines of `sql`'s answer.
    pub fn run(&mut self, sql: &str) -> Vec<String> {
        writeln!(self.stdin, "{sql}; SELECT 'done';").unwrap();
        self.stdin.flush().unwrap();
        let mut out = Vec::new();
        loop {
            let line = self.lines.recv_timeout(patience()).expect("psql answers");
            if line == "done" {
                return out;
            }
            out.push(line);
        }
    }

    pub fn count(&mut self, sql: &str) -> usize {
        self.run(sql)[0].parse().unwrap()
    }

    /// The sessions shown as `app` in `pg_stat_activity`.
    pub fn sessions_of(&mut self, app: &str) -> usize {
        self.count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"
        ))
    }

    /// The advisory locks waited for.
    pub fn waiters(&mut self) -> usize {
        self.count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
    }
}

impl Drop for Psql {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
