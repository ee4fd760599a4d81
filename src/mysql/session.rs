//! One server session (a connection) of a [`MySqlClient`](super::MySqlClient): what a waiter
//! waits on and a hold holds on, and how another thread ends it.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::core::error::{Error, Result};

/// Server error codes zklock tells apart.
pub(crate) mod code {
    /// `ER_ACCESS_DENIED_ERROR`: a wrong user or password.
    pub(crate) const ACCESS_DENIED: u16 = 1045;
    /// `ER_DBACCESS_DENIED_ERROR`: no right to the database.
    pub(crate) const DB_ACCESS_DENIED: u16 = 1044;
    /// `ER_CONNECTION_KILLED` (MariaDB): `KILL`.
    pub(crate) const CONNECTION_KILLED: u16 = 1927;
    /// `ER_SERVER_SHUTDOWN`.
    pub(crate) const SERVER_SHUTDOWN: u16 = 1053;
    /// `ER_SECURE_TRANSPORT_REQUIRED`: a connection in the clear to a server with
    /// `require_secure_transport = ON`.
    pub(crate) const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
    /// `ER_NO_SUCH_THREAD`: `KILL` of a session that has ended.
    pub(crate) const NO_SUCH_THREAD: u16 = 1094;
    /// `ER_UNKNOWN_COM_ERROR`, which a Galera node answers while it is not part of the
    /// cluster's primary component ("WSREP has not yet prepared node for application use").
    pub(crate) const WSREP_NOT_READY: u16 = 1047;
    /// `ER_ERROR_DURING_COMMIT`, which a Galera node answers to a write it cannot replicate
    /// ("… Not connected to Primary Component").
    pub(crate) const ERROR_DURING_COMMIT: u16 = 1180;
}

/// Whether `e` says the server is a Galera node outside the cluster's primary component (it
/// lost its quorum, or is joining): unavailable as a whole server is, until it rejoins.
fn galera_unavailable(e: &mysql::MySqlError) -> bool {
    match e.code {
        code::WSREP_NOT_READY => e.message.contains("WSREP"),
        code::ERROR_DURING_COMMIT => e.message.contains("Primary Component"),
        _ => false,
    }
}

/// A server session: its connection (`None` once ended), its `CONNECTION_ID()` and socket.
pub(crate) struct Session {
    conn: Mutex<Option<mysql::Conn>>,
    /// `CONNECTION_ID()`: what `KILL` names.
    pub(crate) id: u32,
    /// The connection's socket, valid as long as `conn` holds the connection: `conn` is only
    /// emptied by [`Session::close`], after which `fd` is not used.
    fd: RawFd,
    ended: AtomicBool,
}

impl Session {
    /// Opens a session with `opts` (which carry the timeouts and the session's settings).
    pub(crate) fn open(opts: &mysql::Opts) -> mysql::Result<Session> {
        let conn = mysql::Conn::new(opts.clone())?;
        Ok(Session {
            id: conn.connection_id(),
            fd: conn.as_raw_fd(),
            conn: Mutex::new(Some(conn)),
            ended: AtomicBool::new(false),
        })
    }

    /// Whether the session has ended (or been ended).
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Runs `f` on the connection, its answers awaited for at most `timeout` (`None`: without
    /// limit), then for the operation timeout `op` again. An error that leaves the connection
    /// unusable ends the session.
    pub(crate) fn with<T>(
        &self,
        timeout: Option<Duration>,
        op: Duration,
        f: impl FnOnce(&mut mysql::Conn) -> mysql::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn.lock();
        let Some(c) = conn.as_mut().filter(|_| !self.ended()) else {
            return Err(Error::ConnectionLoss);
        };
        let changed = timeout != Some(op);
        if changed {
            self.receive_timeout(timeout);
        }
        let answer = f(c);
        if changed {
            self.receive_timeout(Some(op));
        }
        answer.map_err(|e| {
            let e = error(&e);
            if matches!(e, Error::ConnectionLoss) {
                self.ended.store(true, Ordering::Release);
            }
            e
        })
    }

    /// A heartbeat: `COM_PING`, which restarts the server's `wait_timeout`.
    pub(crate) fn ping(&self, op: Duration) -> Result<()> {
        self.with(Some(op), op, |c| c.ping())
    }

    /// Whether the server has ended this idle session: its socket has something to read (an
    /// error packet, the end of the stream) while no request is out. `false` while another
    /// thread uses the connection.
    pub(crate) fn ended_by_server(&self) -> bool {
        let Some(conn) = self.conn.try_lock() else {
            return false;
        };
        if conn.is_none() || self.ended() {
            return true;
        }
        let mut readable = false;
        with_fd(self.fd, |fd| {
            use rustix::event::{poll, PollFd, PollFlags};
            // RDHUP (the peer shut its side) is Linux's; elsewhere the end reads as IN.
            #[cfg(any(target_os = "linux", target_os = "android"))]
            let flags = PollFlags::IN | PollFlags::RDHUP;
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            let flags = PollFlags::IN;
            let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
            let zero = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            readable = poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0);
        });
        drop(conn);
        readable
    }

    /// Whether an idle session can take a request: not ended, and not ended by the server
    /// meanwhile (a restart closes every connection: the next request would fail on it).
    pub(crate) fn usable(&self) -> bool {
        !self.ended() && !self.ended_by_server()
    }

    /// Ends the session from any thread, at once: its socket is shut down, so a thread reading
    /// an answer on it wakes with an error, and the server, reading the end, frees what the
    /// session held (at once if it was idle, as a holder is).
    pub(crate) fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            shutdown(self.fd);
        }
    }

    /// Closes the connection (the server frees the session's locks as it reads the end).
    pub(crate) fn close(&self) {
        self.end();
        // Waits for a thread using the connection: its read fails at once on the shut socket.
        drop(self.conn.lock().take());
    }

    /// The socket's receive timeout (`None`: none): how long a read of an answer may block.
    fn receive_timeout(&self, timeout: Option<Duration>) {
        let timeout = timeout.filter(|t| !t.is_zero());
        with_fd(self.fd, |fd| {
            let _ = rustix::net::sockopt::set_socket_timeout(
                fd,
                rustix::net::sockopt::Timeout::Recv,
                timeout,
            );
        });
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Release);
    }
}

/// Shuts `fd` down both ways.
fn shutdown(fd: RawFd) {
    with_fd(fd, |fd| {
        let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Both);
    });
}

/// `f` of the socket `fd`, which the caller keeps open.
#[allow(unsafe_code)]
fn with_fd(fd: RawFd, f: impl FnOnce(std::os::fd::BorrowedFd<'_>)) {
    // SAFETY: every caller passes the socket of a `Session` whose connection has not been
    // dropped: `Session::close` ends the session (after which no caller passes its fd) and
    // only then drops the connection, and the session itself outlives every call on it
    // (callers hold it by `Arc` or `&`).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    f(fd)
}

/// zklock's error for the `mysql` crate's `e`.
pub(crate) fn error(e: &mysql::Error) -> Error {
    match e {
        mysql::Error::MySqlError(e) => match e.code {
            code::ACCESS_DENIED | code::DB_ACCESS_DENIED => {
                Error::AuthFailed(format!("{} (error {})", e.message, e.code))
            }
            code::CONNECTION_KILLED | code::SERVER_SHUTDOWN => Error::ConnectionLoss,
            // Retried through the retry policy, on a new session, as a server that went away.
            _ if galera_unavailable(e) => {
                tracing::debug!(
                    "zklock: the MySQL server is a Galera node outside the primary component: \
                     {} (error {})",
                    e.message,
                    e.code
                );
                Error::ConnectionLoss
            }
            _ => Error::MySql(format!(
                "{} (error {}, SQLSTATE {})",
                e.message, e.code, e.state
            )),
        },
        mysql::Error::IoError(_) | mysql::Error::CodecError(_) => Error::ConnectionLoss,
        mysql::Error::DriverError(
            mysql::DriverError::ConnectTimeout | mysql::DriverError::CouldNotConnect(_),
        ) => Error::ConnectionLoss,
        mysql::Error::DriverError(e) => Error::MySql(format!("client: {e}")),
        other => Error::MySql(other.to_string()),
    }
}

/// The text a connect failure is told with: the `mysql` crate's own words.
pub(crate) fn connect_error(e: &mysql::Error) -> Error {
    if let Some(why) = super::tls::refusal(e) {
        return Error::Tls(why);
    }
    if let mysql::Error::MySqlError(e) = e {
        if e.code == code::SECURE_TRANSPORT_REQUIRED || e.message.contains("insecure transport") {
            return Error::MySql(format!(
                "{} (error {}): the server requires TLS; connect with ssl-mode=VERIFY_IDENTITY \
                 (and ssl-ca=PATH for a private CA), feature `tls`",
                e.message, e.code
            ));
        }
    }
    match error(e) {
        Error::ConnectionLoss => Error::Io {
            context: "connecting".into(),
            kind: match e {
                mysql::Error::IoError(io) => io.kind(),
                _ => std::io::ErrorKind::Other,
            },
            message: e.to_string(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(code: u16, message: &str) -> mysql::Error {
        mysql::Error::MySqlError(mysql::MySqlError {
            state: "HY000".into(),
            message: message.into(),
            code,
        })
    }

    #[test]
    fn a_galera_node_outside_the_primary_component_is_a_lost_connection() {
        let lost = [
            server_error(1047, "WSREP has not yet prepared node for application use"),
            server_error(
                1180,
                "Error while appending streaming replication fragment(provider status: Not \
                 connected to Primary Component)",
            ),
        ];
        for e in &lost {
            assert!(matches!(error(e), Error::ConnectionLoss), "{e}");
        }
        // The same codes for another reason stay the server's error.
        for e in [
            server_error(1047, "Unknown command"),
            server_error(1180, "Got error 5 during COMMIT"),
        ] {
            assert!(matches!(error(&e), Error::MySql(_)), "{e}");
        }
    }
}
