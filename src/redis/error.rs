//! Redis errors as zklock's: a connection failure is [`Error::ConnectionLoss`] (retried by the
//! policy), refused credentials [`Error::AuthFailed`], a refused TLS handshake [`Error::Tls`]
//! with rustls's reason, the rest [`Error::Redis`].

use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::Error;

/// A Redis error as zklock's: connection failures are [`Error::ConnectionLoss`] (retried by
/// the policy), refused credentials [`Error::AuthFailed`], the rest [`Error::Redis`].
pub(crate) fn error(e: redis::RedisError) -> Error {
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
    {
        return Error::AuthFailed(e.to_string());
    }
    if e.is_connection_refusal() {
        return Error::Io {
            context: "connecting to Redis".into(),
            kind: std::io::ErrorKind::ConnectionRefused,
            message: e.to_string(),
        };
    }
    if let Some(why) = tls_refusal(&e) {
        return Error::Tls(why);
    }
    if broken(&e) {
        return Error::ConnectionLoss;
    }
    Error::Redis(e.to_string())
}

/// A Client's first connection's error, as [`error`] gives it, except that what would read as a
/// lost connection says what happened: the name of `host` (`host` of `host:port`, for one
/// server) did not resolve, the server accepted the connection and answered nothing within
/// `bound`, or it closed the connection without an answer (as a server that requires TLS does).
pub(crate) fn connect_error(
    e: redis::RedisError,
    host: Option<(&str, u16)>,
    bound: Duration,
) -> Error {
    if !broken(&e) || e.is_connection_refusal() || e.code() == Some("READONLY") {
        return error(e);
    }
    let (kind, message) = if e.is_timeout() {
        (
            std::io::ErrorKind::TimedOut,
            format!("the server accepted the connection and answered nothing within {bound:?}"),
        )
    } else if let Some((name, port)) =
        host.filter(|&(name, port)| (name, port).to_socket_addrs().is_err())
    {
        (
            std::io::ErrorKind::NotFound,
            format!("the host name {name:?} (port {port}) did not resolve: {e}"),
        )
    } else if e.is_connection_dropped() {
        (
            std::io::ErrorKind::ConnectionAborted,
            format!(
                "the server closed the connection without an answer (as one that requires TLS \
                 does: rediss://): {e}"
            ),
        )
    } else {
        return error(e);
    };
    Error::Io {
        context: "connecting to Redis".into(),
        kind,
        message,
    }
}

/// Whether `e` says the connection is of no more use: it failed, timed out or was closed, or
/// its server is no longer the primary (`READONLY`: demoted by a failover whose sentinels did
/// not close it) — a new connection is opened, to the current primary.
pub(crate) fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.code() == Some("READONLY")
}

/// Whether `e` is a refused TLS handshake (a certificate not trusted, or not for the host):
/// another attempt would be refused too.
pub(crate) fn tls_refused(e: &redis::RedisError) -> bool {
    tls_refusal(e).is_some()
}

/// Why a TLS handshake failed, when that is what `e` is: rustls's error inside the I/O error,
/// which would otherwise read as a lost connection.
fn tls_refusal(e: &redis::RedisError) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        #[cfg(feature = "tls")]
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(format!("the TLS handshake failed: {tls}"));
        }
        // The redis crate keeps its I/O errors as `Arc<dyn Error + Send + Sync>`.
        type Shared = Arc<dyn std::error::Error + Send + Sync>;
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            cause
                .downcast_ref::<Shared>()
                .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        });
        #[cfg(feature = "tls")]
        if let Some(tls) = io
            .and_then(std::io::Error::get_ref)
            .and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(format!("the TLS handshake failed: {tls}"));
        }
        let _ = io;
        source = cause.source();
    }
    None
}
