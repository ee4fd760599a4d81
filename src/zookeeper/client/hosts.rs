//! The connect string: `[tcp://|tcp+tls://]host:port[,…]` checked and normalised, and the
//! hosts probed with plain sockets (and a TLS handshake) to say why a connect failed.

use std::time::Duration;

use super::config::Config;
use crate::core::error::{Error, Result};

pub(super) const TLS_PREFIX: &str = "tcp+tls://";
pub(super) const TCP_PREFIX: &str = "tcp://";

/// `host` of `[scheme://]host:port` (IPv6 without brackets).
#[cfg_attr(not(feature = "tls"), allow(dead_code))] // only TLS checks a host name
pub(crate) fn host_name(entry: &str) -> &str {
    let bare = entry
        .strip_prefix(TLS_PREFIX)
        .or_else(|| entry.strip_prefix(TCP_PREFIX))
        .unwrap_or(entry);
    let host = bare.rsplit_once(':').map_or(bare, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// `host:port` of `[scheme://]host:port`.
fn socket_address(entry: &str) -> &str {
    entry
        .strip_prefix(TLS_PREFIX)
        .or_else(|| entry.strip_prefix(TCP_PREFIX))
        .unwrap_or(entry)
}

/// Why the hosts cannot be reached, if a socket says so: the first name that does not resolve
/// or address that refuses or does not answer a TCP connection within a second. `None` if some
/// host accepts a connection (the trouble is then beyond the socket).
pub(super) fn probe(hosts: &str) -> Option<Error> {
    first_failure(hosts, Duration::from_secs(1), |_| true)
}

/// Why no host can ever answer, if that is certain now: every name fails to resolve or every
/// address refuses the TCP connection (nothing listens there). `None` as soon as one address
/// accepts a connection or does not answer within `patience` (it may be slow, not absent).
pub(super) fn refused_by_every_host(hosts: &str, patience: Duration) -> Option<Error> {
    first_failure(hosts, patience, |e| {
        e.kind() == std::io::ErrorKind::ConnectionRefused
    })
}

/// Tries a TCP connection to every address of every host (for at most `patience` each): the
/// first failure, when no name resolved and every address failed in a way `counts`; `None` as
/// soon as one connects or fails in a way that does not count.
fn first_failure(
    hosts: &str,
    patience: Duration,
    counts: impl Fn(&std::io::Error) -> bool,
) -> Option<Error> {
    use std::net::{TcpStream, ToSocketAddrs};
    let mut first = None;
    for host in hosts.split(',').map(socket_address) {
        let addrs = match host.to_socket_addrs() {
            Ok(a) => a,
            Err(e) => {
                first.get_or_insert(Error::io(format!("resolving {host}"), &e));
                continue;
            }
        };
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, patience) {
                Err(e) if counts(&e) => {
                    first.get_or_insert(Error::io(format!("connecting to {host} ({addr})"), &e));
                }
                _ => return None,
            }
        }
    }
    first
}

/// Why a TLS host refuses us, if a handshake tells.
pub(super) fn probe_tls(config: &Config) -> Option<Error> {
    #[cfg(feature = "tls")]
    {
        let Some(tls) = config.tls.as_ref() else {
            // A plain client pointed at a TLS port gets no answer it understands.
            for entry in config.hosts.split(',') {
                let port = socket_address(entry).rsplit_once(':')?.1.parse().ok()?;
                if super::tls::speaks_tls(host_name(entry), port) {
                    return Some(Error::Tls(format!(
                        "{} speaks TLS: connect with tcp+tls:// hosts and \
                         ClientBuilder::tls_ca_pem",
                        socket_address(entry)
                    )));
                }
            }
            return None;
        };
        for entry in config.hosts.split(',') {
            if entry.starts_with(TCP_PREFIX) {
                continue;
            }
            let port = socket_address(entry).rsplit_once(':')?.1.parse().ok()?;
            if let Some(e) = tls.settings.probe(host_name(entry), port) {
                return Some(e);
            }
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = config;
    None
}

/// Checks `[scheme://]host:port[,…]` (scheme `tcp` or `tcp+tls`, the wire client's); a chroot
/// suffix is refused in favour of `namespace`.
pub(super) fn parse_hosts(s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::invalid(
            "connect string is empty: expected host:port[,host:port…]",
        ));
    }
    let mut hosts = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (scheme, part) = if let Some(rest) = part.strip_prefix(TLS_PREFIX) {
            (TLS_PREFIX, rest)
        } else if let Some(rest) = part.strip_prefix(TCP_PREFIX) {
            (TCP_PREFIX, rest)
        } else {
            ("", part)
        };
        if part.contains("://") {
            return Err(Error::invalid(format!(
                "connect string {s:?}: only tcp:// and tcp+tls:// hosts are supported"
            )));
        }
        if part.contains('/') {
            return Err(Error::invalid(format!(
                "connect string {s:?} has a chroot suffix: use ClientBuilder::namespace instead"
            )));
        }
        let bad = |why: &str| Err(Error::invalid(format!("connect string {s:?}: {why}")));
        if part.is_empty() {
            return bad("empty host entry");
        }
        let (host, port) = match part.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') || h.starts_with('[') => (h, Some(p)),
            _ => (part, None),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("bad host name");
        }
        let port = match port {
            None => 2181,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p != 0 => p,
                _ => return bad("port must be a number from 1 to 65535"),
            },
        };
        if host.contains(':') {
            hosts.push(format!("{scheme}[{host}]:{port}"));
        } else {
            hosts.push(format!("{scheme}{host}:{port}"));
        }
    }
    Ok(hosts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        assert_eq!(parse_hosts("a:1,b:2").unwrap(), "a:1,b:2");
        assert_eq!(parse_hosts(" a , b:3 ").unwrap(), "a:2181,b:3");
        assert_eq!(parse_hosts("[::1]:2181").unwrap(), "[::1]:2181");
        assert_eq!(
            parse_hosts("tcp+tls://a:1, tcp://b").unwrap(),
            "tcp+tls://a:1,tcp://b:2181"
        );
        assert_eq!(host_name("tcp+tls://[::1]:2181"), "::1");
        assert_eq!(socket_address("tcp://b:2181"), "b:2181");
        for bad in [
            "",
            " ",
            ",",
            "a:1,,b:2",
            "a:x",
            "a:0",
            "a:70000",
            ":2181",
            "a:1/chroot",
            "a b:1",
            "http://a:1",
            "tcp+tls://a:1/chroot",
        ] {
            assert!(
                matches!(parse_hosts(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
