//! The connection options every backend's Client builder shares, held in one struct that each
//! builder embeds, with their setters written once ([`connection_options!`]) and their
//! defaults in [`defaults`](super::defaults).

use std::sync::Arc;
use std::time::Duration;

use super::defaults::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_SESSION_TIMEOUT};
use super::retry::{ExponentialBackoffRetry, RetryPolicy};

/// What a builder was told of the shared options; `None`: not set, the default applies.
#[derive(Clone, Default)]
pub(crate) struct Options {
    pub(crate) session_timeout: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) operation_timeout: Option<Duration>,
    pub(crate) retry: Option<Arc<dyn RetryPolicy>>,
}

impl Options {
    /// The session timeout, or [`DEFAULT_SESSION_TIMEOUT`].
    pub(crate) fn session_timeout(&self) -> Duration {
        self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT)
    }

    /// The connect timeout, or [`DEFAULT_CONNECT_TIMEOUT`].
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT)
    }

    /// The operation timeout, or the connect timeout.
    pub(crate) fn operation_timeout(&self) -> Duration {
        (self.operation_timeout).unwrap_or_else(|| self.connect_timeout())
    }

    /// The retry policy, or [`default_retry`].
    pub(crate) fn retry(&self) -> Arc<dyn RetryPolicy> {
        self.retry.clone().unwrap_or_else(default_retry)
    }

    /// Every timeout set, the unset ones at their defaults, the operation timeout `op`: what
    /// the URL factory hands a backend's builder.
    pub(crate) fn resolved(&self, op: Duration) -> Options {
        Options {
            session_timeout: Some(self.session_timeout()),
            connect_timeout: Some(self.connect_timeout()),
            operation_timeout: Some(op),
            retry: self.retry.clone(),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

/// The retry policy of a Client not given one: exponential backoff from 100 ms, 3 retries.
pub(crate) fn default_retry() -> Arc<dyn RetryPolicy> {
    match ExponentialBackoffRetry::new(Duration::from_millis(100), 3) {
        Ok(policy) => Arc::new(policy),
        Err(_) => unreachable!("100 ms and 3 retries are a valid policy"),
    }
}

/// The setters of the shared options for a builder whose [`Options`] is the field `options`:
/// `session_timeout`, `connect_timeout`, `operation_timeout` and `retry_policy`, documented
/// once here for every backend.
macro_rules! connection_options {
    ($builder:ty) => {
        impl $builder {
            /// The server-side silence limit: how long after the Client's last heartbeat the
            /// server frees its holds (ZooKeeper's session timeout, the Redis keys' TTL, the
            /// PostgreSQL and MySQL sessions' limits, the in-process store's simulated one).
            /// Default [`DEFAULT_SESSION_TIMEOUT`](crate::DEFAULT_SESSION_TIMEOUT), 30 s, on
            /// every backend. `connect` refuses, before any I/O, a length the backend cannot
            /// keep (see the crate docs' "Connection options").
            pub fn session_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.options.session_timeout = Some(timeout);
                self
            }

            /// How long opening a connection may take. Default
            /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT), 10 s, on every
            /// backend. `connect` refuses zero before any I/O.
            pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.options.connect_timeout = Some(timeout);
                self
            }

            /// The bound of one round trip to the server. Default: the connect timeout (see
            /// the crate docs' "Connection options" for the backends that differ). `connect`
            /// refuses zero before any I/O.
            pub fn operation_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.options.operation_timeout = Some(timeout);
                self
            }

            /// How calls retry when a connection fails. Default: exponential backoff from
            /// 100 ms, 3 retries (see the crate docs' "Connection options" for the backends
            /// that differ).
            pub fn retry_policy(mut self, policy: impl $crate::RetryPolicy) -> Self {
                self.options.retry = Some(std::sync::Arc::new(policy));
                self
            }

            /// The options `options` sets, in place of these; the others as they are.
            #[allow(dead_code)] // not every builder is handed options
            pub(crate) fn with_options(mut self, options: &$crate::core::options::Options) -> Self {
                let (mine, given) = (&mut self.options, options.clone());
                mine.session_timeout = given.session_timeout.or(mine.session_timeout);
                mine.connect_timeout = given.connect_timeout.or(mine.connect_timeout);
                mine.operation_timeout = given.operation_timeout.or(mine.operation_timeout);
                mine.retry = given.retry.or(mine.retry.take());
                self
            }
        }
    };
}
pub(crate) use connection_options;
