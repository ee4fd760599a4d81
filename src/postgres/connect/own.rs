//! A session on a socket zklock connects itself (Linux, a URL with one host), so that a caller
//! in a blocking call writes its statements and reads their answers on its own thread
//! (`drive.rs`); between its statements the session's monitor, a task on the Client's runtime,
//! has the connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;

use super::{open_error, End};
use crate::core::error::{Error, Result};
use crate::postgres::drive::{Conn, Sock, Socket, Watch};
use crate::postgres::error::error;
use crate::postgres::tls::Tls;

/// A session's connection on a socket zklock connected, and where its cancel requests go.
pub(crate) struct Own {
    conn: Arc<Conn>,
    peer: Peer,
}

impl Own {
    /// Whether zklock connects `config`'s sessions itself: a URL with one host, unless
    /// tokio-postgres's own connect is needed (`hostaddr`, a session kind to look for, hosts to
    /// balance).
    pub(crate) fn fits(config: &tokio_postgres::Config) -> bool {
        Peer::of(config).is_some()
    }

    /// Connects a session (one that [`fits`](Self::fits)) within `connect_timeout` (the TCP
    /// connection and the startup together), with its socket in `watch`, and starts its
    /// monitor.
    pub(super) async fn connect(
        watch: &Arc<Watch>,
        config: &tokio_postgres::Config,
        tls: &Tls,
        connect_timeout: Duration,
        end: End,
    ) -> Result<(tokio_postgres::Client, Own)> {
        let peer = Peer::of(config).ok_or_else(|| {
            Error::invalid("zklock cannot connect this URL's sessions on a socket of its own")
        })?;
        // The TCP connection and the startup (TLS, authentication, parameters) within one bound.
        let until = tokio::time::Instant::now() + connect_timeout;
        let (socket, domain) = tokio::time::timeout_at(until, peer.connect(config, watch))
            .await
            .map_err(|_| {
                timed_out_at(
                    &peer,
                    format!("no connection within {connect_timeout:?} (the connection timeout)"),
                )
            })??;
        let tls_connect = MakeTlsConnect::<Socket>::make_tls_connect(&mut tls.clone(), &domain)
            .map_err(|e| Error::Tls(e.to_string()))?;
        let handle = socket.handle();
        let (client, connection) =
            tokio::time::timeout_at(until, config.connect_raw(socket, tls_connect))
                .await
                .map_err(|_| {
                    timed_out_at(
                        &peer,
                        format!(
                            "the connection was accepted and the server did not answer within \
                             {connect_timeout:?} (the connection timeout, per host): a frozen \
                             server or a host that drops what it is sent"
                        ),
                    )
                })?
                .map_err(|e| open_error(&e, config))?;
        let conn = Conn::new(handle, connection);
        let (monitored, closed) = (conn.clone(), conn.clone());
        end.spawn(
            async move {
                if let Some(e) = monitored.monitor().await {
                    tracing::debug!("zklock: a PostgreSQL session ended: {e}");
                }
            },
            move || closed.close(),
        );
        Ok((client, Own { conn, peer }))
    }

    /// Ends the session now, on the calling thread: the server reads the socket's end at once.
    pub(crate) fn close(&self) {
        self.conn.close();
    }

    /// Runs `f`, statements of this session: a caller in a blocking call drives the session's
    /// socket itself meanwhile.
    pub(crate) async fn drive<F: std::future::Future>(&self, f: Pin<&mut F>) -> F::Output {
        self.conn.drive(f).await
    }

    /// Sends `token`'s cancel request over a connection of its own.
    pub(crate) async fn cancel(
        &self,
        token: &tokio_postgres::CancelToken,
        tls: &Tls,
    ) -> Result<()> {
        self.peer.cancel(token, tls).await
    }
}

/// Where a session zklock connects itself goes: the URL's one host.
#[derive(Clone, Debug)]
enum Peer {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Peer {
    /// The one host of `config`, unless tokio-postgres's own connect is needed (several hosts,
    /// `hostaddr`, a session kind to look for).
    fn of(config: &tokio_postgres::Config) -> Option<Peer> {
        use tokio_postgres::config::{LoadBalanceHosts, TargetSessionAttrs};
        let [host] = config.get_hosts() else {
            return None;
        };
        if !config.get_hostaddrs().is_empty()
            || config.get_ports().len() > 1
            || config.get_target_session_attrs() != TargetSessionAttrs::Any
            || config.get_load_balance_hosts() != LoadBalanceHosts::Disable
        {
            return None;
        }
        let port = config.get_ports().first().copied().unwrap_or(5432);
        Some(match host {
            Host::Tcp(host) => Peer::Tcp {
                host: host.clone(),
                port,
            },
            Host::Unix(dir) => Peer::Unix(dir.join(format!(".s.PGSQL.{port}"))),
        })
    }

    /// A socket to the server, with `config`'s keepalives, and the name TLS checks the
    /// server's certificate for.
    async fn connect(
        &self,
        config: &tokio_postgres::Config,
        sockets: &Arc<Watch>,
    ) -> Result<(Socket, String)> {
        let failed = |e: &std::io::Error| Error::io("connecting to PostgreSQL", e);
        let (sock, domain) = match self {
            Peer::Tcp { host, port } => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), *port))
                    .await
                    .map_err(|e| Error::Io {
                        context: "connecting to PostgreSQL".into(),
                        kind: e.kind(),
                        message: format!("the host name {host:?} does not resolve: {e}"),
                    })?
                    .collect();
                let mut last = None;
                let mut connected = None;
                for addr in addrs {
                    match tokio::net::TcpStream::connect(addr).await {
                        Ok(s) => {
                            connected = Some(s);
                            break;
                        }
                        Err(e) => last = Some((addr, e)),
                    }
                }
                let stream = match (connected, last) {
                    (Some(s), _) => s,
                    (None, Some((addr, e))) => {
                        return Err(Error::Io {
                            context: "connecting to PostgreSQL".into(),
                            kind: e.kind(),
                            message: format!("{addr}: {e}"),
                        })
                    }
                    (None, None) => {
                        return Err(Error::Io {
                            context: "connecting to PostgreSQL".into(),
                            kind: std::io::ErrorKind::NotFound,
                            message: format!("{host:?} has no address"),
                        })
                    }
                };
                let stream = stream.into_std().map_err(|e| failed(&e))?;
                stream.set_nodelay(true).map_err(|e| failed(&e))?;
                keepalives(&stream, config).map_err(|e| failed(&e))?;
                (Sock::Tcp(stream), host.clone())
            }
            Peer::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| failed(&e))?
                    .into_std()
                    .map_err(|e| failed(&e))?;
                (Sock::Unix(stream), String::new())
            }
        };
        Ok((Socket::new(sock, sockets).map_err(|e| failed(&e))?, domain))
    }

    /// Sends `token`'s cancel request over a connection of its own.
    async fn cancel(&self, token: &tokio_postgres::CancelToken, tls: &Tls) -> Result<()> {
        let failed = |e: &std::io::Error| Error::io("connecting to PostgreSQL", e);
        match self {
            Peer::Tcp { host, port } => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| failed(&e))?;
                let connect = MakeTlsConnect::<tokio::net::TcpStream>::make_tls_connect(
                    &mut tls.clone(),
                    host,
                )
                .map_err(|e| Error::Tls(e.to_string()))?;
                token.cancel_query_raw(stream, connect).await
            }
            Peer::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| failed(&e))?;
                let connect = MakeTlsConnect::<tokio::net::UnixStream>::make_tls_connect(
                    &mut tls.clone(),
                    "",
                )
                .map_err(|e| Error::Tls(e.to_string()))?;
                token.cancel_query_raw(stream, connect).await
            }
        }
        .map_err(|e| error(&e, false))
    }
}

/// `config`'s TCP keepalives and user timeout on `stream`, as tokio-postgres sets them.
fn keepalives(
    stream: &std::net::TcpStream,
    config: &tokio_postgres::Config,
) -> std::io::Result<()> {
    use rustix::net::sockopt;
    if config.get_keepalives() {
        sockopt::set_socket_keepalive(stream, true)?;
        sockopt::set_tcp_keepidle(stream, config.get_keepalives_idle())?;
        if let Some(interval) = config.get_keepalives_interval() {
            sockopt::set_tcp_keepintvl(stream, interval)?;
        }
        if let Some(retries) = config.get_keepalives_retries() {
            sockopt::set_tcp_keepcnt(stream, retries)?;
        }
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        sockopt::set_tcp_user_timeout(stream, ms)?;
    }
    Ok(())
}

/// A connection to `peer` not made in time, saying which phase (`what`).
fn timed_out_at(peer: &Peer, what: String) -> Error {
    let at = match peer {
        Peer::Tcp { host, port } => format!("{host}:{port}"),
        Peer::Unix(path) => path.display().to_string(),
    };
    Error::Io {
        context: format!("connecting to PostgreSQL at {at}"),
        kind: std::io::ErrorKind::TimedOut,
        message: what,
    }
}
