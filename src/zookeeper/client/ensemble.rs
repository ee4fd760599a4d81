//! Following the ensemble (Curator's `EnsembleTracker`): the members a Client (re)connects to.
//!
//! The wire client keeps the host list it was opened with for the whole life of its session, and
//! retries only those hosts. The Client therefore keeps the current list itself: read from the
//! ensemble's own `/zookeeper/config` (watched, read again after every change) or given by
//! [`Client::update_connect_string`](super::Client::update_connect_string). Every new session is
//! opened on the current list, and a session whose hosts all went away is moved to the new ones
//! (see the session supervisor).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::hosts::parse_hosts;
use super::runtime::{sleep, Signal};
use super::shared::Shared;

/// The client addresses of every member (participants and observers) named by the data of
/// `/zookeeper/config`, as a checked connect string in server-id order; `None` if the data
/// names none or is not such a config (nothing is changed then).
///
/// A line reads `server.<id>=<host>:<quorum port>:<election port>[:<role>][;[<host>:]<port>]`;
/// a member without a client address is skipped, and a wildcard client host (`0.0.0.0`, `::`)
/// stands for the member's quorum host.
pub(crate) fn members_of_config(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?;
    let mut members = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('=') else {
            continue;
        };
        let Some(id) = key.trim().strip_prefix("server.") else {
            continue;
        };
        let id: u64 = id.parse().ok()?;
        let Some((quorum, client)) = value.trim().split_once(';') else {
            continue;
        };
        let quorum_host = split_host(quorum.trim())?.0;
        let client = client.trim();
        let (host, port) = match split_host(client) {
            Some((host, port)) => (host, port),
            None => ("", client),
        };
        let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
        let host = match host {
            "" | "0.0.0.0" | "::" | "0:0:0:0:0:0:0:0" => quorum_host,
            h => h,
        };
        if host.is_empty() {
            return None;
        }
        let host = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        members.insert(id, host);
    }
    if members.is_empty() {
        return None;
    }
    parse_hosts(&members.into_values().collect::<Vec<_>>().join(",")).ok()
}

/// `(host, rest)` of `host:rest` or `[v6]:rest`; `None` without a `:` after the host.
fn split_host(s: &str) -> Option<(&str, &str)> {
    if let Some(v6) = s.strip_prefix('[') {
        let (host, rest) = v6.split_once(']')?;
        return Some((host, rest.strip_prefix(':')?));
    }
    s.split_once(':')
}

/// The hosts of `list` that `known` does not name.
pub(crate) fn new_hosts(list: &str, known: &str) -> Vec<String> {
    let known: Vec<&str> = known.split(',').collect();
    list.split(',')
        .filter(|h| !known.contains(h))
        .map(str::to_owned)
        .collect()
}

/// Reads and watches `/zookeeper/config` through `zk` (outside any namespace) and records the
/// members it names as the Client's host list, again after every change, until `stop` is set.
/// A read that fails (connection lost, or an old server without the node) is tried again
/// after a pause; a node that does not parse is logged and leaves the list as it is.
pub(crate) async fn track(shared: &Shared, zk: zk::Client, stop: Signal) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let read = future::or(async { Some(zk.get_and_watch_config().await) }, async {
            stop.wait().await;
            None
        });
        let watcher = match read.await {
            None => return,
            Some(Ok((data, _, watcher))) => {
                backoff.reset();
                match members_of_config(&data) {
                    Some(hosts) => shared.set_hosts(hosts, "the ensemble's configuration"),
                    // A standalone server's node names no member: nothing to follow.
                    None if !data.windows(7).any(|w| w == b"server.") => {
                        tracing::debug!("/zookeeper/config names no member: nothing to follow")
                    }
                    None => tracing::warn!(
                        "ignoring /zookeeper/config: it names no member with a client address \
                         ({:?})",
                        String::from_utf8_lossy(&data)
                    ),
                }
                watcher
            }
            Some(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => return,
            Some(Err(e)) => {
                tracing::debug!("cannot read /zookeeper/config: {e}");
                if future::or(
                    async {
                        sleep(backoff.next_pause()).await;
                        false
                    },
                    async {
                        stop.wait().await;
                        true
                    },
                )
                .await
                {
                    return;
                }
                continue;
            }
        };
        let fired = future::or(async { Some(watcher.changed().await) }, async {
            stop.wait().await;
            None
        });
        match fired.await {
            None => return,
            Some(event) if event.event_type == zk::EventType::NodeDataChanged => {}
            // The session ended: the next session has a tracker of its own.
            Some(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_from_a_dynamic_config() {
        let cfg = b"server.2=127.0.0.1:2889:3889:participant;127.0.0.1:2182\n\
                    server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\n\
                    server.3=zk3:2890:3890:observer;2183\n\
                    server.4=127.0.0.1:2891:3891\n\
                    version=100000000\n";
        assert_eq!(
            members_of_config(cfg).as_deref(),
            Some("10.0.0.1:2181,127.0.0.1:2182,zk3:2183")
        );
        assert_eq!(
            members_of_config(b"server.1=[::1]:1:2;[::1]:3\n").as_deref(),
            Some("[::1]:3")
        );
    }

    #[test]
    fn malformed_configs_change_nothing() {
        for bad in [
            &b""[..],
            b"version=1\n",
            b"server.1=127.0.0.1:1:2\n",
            b"server.x=127.0.0.1:1:2;3\n",
            b"server.1=127.0.0.1:1:2;notaport\n",
            b"server.1=127.0.0.1:1:2;0\n",
            b"server.1=127.0.0.1:1:2;1.2.3.4:70000\n",
            b"server.1=;2181\n",
            b"\xff\xfe",
        ] {
            assert_eq!(members_of_config(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hosts_not_known_yet() {
        assert_eq!(new_hosts("a:1,b:2,c:3", "b:2,x:9"), vec!["a:1", "c:3"]);
        assert!(new_hosts("a:1", "a:1").is_empty());
    }
}
