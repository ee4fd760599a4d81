//! Redis (`--connect redis://…`) as the commands see it: the Client from the global options,
//! and `holders` from the queues' keys. The hold's TTL is `--session-timeout`.

use std::sync::Arc;

use zklock::redis::{RedisMutex, RedisReadWriteLock, RedisSemaphore};
use zklock::{AnyClient, RedisClient};

use crate::args::Global;
#[cfg(feature = "tls")]
use crate::contender::tls_pems;
use crate::contender::{refuse_zookeeper_options, Site};
use crate::listing::{Entry, Listing};
use crate::{CliResult, Context};

/// A connected Redis Client from the global options.
pub fn connect(global: &Global) -> CliResult<RedisClient> {
    refuse_zookeeper_options(global, "Redis", "redis://:PASSWORD@host")?;
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // TLS options are added with `tls`
    let mut builder = RedisClient::builder(&global.connect)
        .ttl(global.session_timeout)
        .connect_timeout(global.connect_timeout);
    #[cfg(feature = "tls")]
    {
        let pems = tls_pems(global)?;
        if let Some(ca) = pems.ca {
            builder = builder.tls_ca_pem(&ca);
        }
        if let Some((cert, key)) = pems.identity {
            builder = builder.tls_identity_pem(&cert, &key);
        }
    }
    builder.connect().context(String::new) // the error names the server and says it cannot connect
}

/// Redis, as the commands use it.
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let keys = client.clone();
    let reader = client.clone();
    Ok(Site {
        client: AnyClient::from(client),
        node: Box::new(move |name| {
            RedisMutex::new(&keys, name).map_or_else(|_| name.to_owned(), |m| m.key().to_owned())
        }),
        listing: Arc::new(move |name, _| listing(&reader, name)),
        lost: "its key expired (the TTL ran out without a renewal) or was taken",
    })
}

/// Every holder and waiter of the mutex (or latch), the read-write lock and the semaphore
/// named `name`: each is a set of keys of its own. The owner is the host and process of the
/// entry's Client (from its id); the token is a mutex holder's.
fn listing(client: &RedisClient, name: &str) -> CliResult<Listing> {
    let read = || -> zklock::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        let mut add = |kind: &str, who: zklock::redis::RedisParticipant| {
            let owner = match (&who.host, who.pid) {
                (Some(host), Some(pid)) => Some(format!("{host} pid {pid}")),
                _ => None,
            };
            entries.push(Entry {
                kind: kind.to_owned(),
                holds: Some(who.holds),
                session: who.id.rsplit_once(':').map(|(client, _)| client.to_owned()),
                id: who.id,
                owner,
                token: who.token,
                age: None,
                expires_in: who.expires_in,
            })
        };
        for who in RedisMutex::new(client, name)?.participants()? {
            add("lock", who);
        }
        for who in RedisReadWriteLock::new(client, name)?
            .read_lock()
            .participants()?
        {
            let kind = if who.id.ends_with('w') {
                "write"
            } else {
                "read"
            };
            add(kind, who);
        }
        for who in RedisSemaphore::new(client, name, 1)?.participants()? {
            add("lease", who);
        }
        Ok(entries)
    };
    let entries = read().context(|| format!("cannot read {name}"))?;
    Ok(Listing {
        backend: "redis",
        name: name.to_owned(),
        layout: Listing::layout_of(&entries),
        entries,
    })
}
