//! A PostgreSQL Client for the tests that run against `TestingPostgres`.

use std::time::Duration;

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
