//! PostgreSQL (`--connect postgres://…`) as the commands see it: the Client from the global
//! options, and `holders` from its participants (`pg_locks` joined with `pg_stat_activity`,
//! and with the table `zklock_tokens` for the holders' tokens when the database has it).
//! The session timeout is `--session-timeout`.

use std::sync::Arc;

use zklock::postgres::{PgMutex, PgParticipant};
use zklock::{AnyClient, PgClient};

use crate::args::Global;
#[cfg(feature = "tls")]
use crate::contender::tls_pems;
use crate::contender::{refuse_zookeeper_options, Site};
use crate::listing::{Entry, Listing};
use crate::{CliResult, Context};

/// A connected PostgreSQL Client from the global options.
pub fn connect(global: &Global) -> CliResult<PgClient> {
    refuse_zookeeper_options(global, "PostgreSQL", "postgres://user:PASSWORD@host/db")?;
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // TLS options are added with `tls`
    let mut builder = PgClient::builder(&global.connect)
        .session_timeout(global.session_timeout)
        .connect_timeout(global.connect_timeout);
    // With sslmode=require, verify-ca or verify-full in the URL.
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

/// PostgreSQL, as the commands use it.
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let (sql, reader) = (client.clone(), client.clone());
    Ok(Site {
        client: AnyClient::from(client),
        node: Box::new(move |name| {
            PgMutex::new(&sql, name).map_or_else(|_| name.to_owned(), |m| m.lock_sql())
        }),
        listing: Arc::new(move |name, max_leases| listing(&reader, name, max_leases)),
        lost: "its database session ended",
    })
}

/// The most leases `holders` looks at when `--max-leases` is not given (a semaphore's most).
const ALL_LEASES: u32 = 10_000;

/// Every session of the database that holds or waits for the name's locks, zklock's or any
/// other SQL client's: the session is the backend's process id, the owner its role, address
/// and application.
fn listing(client: &PgClient, name: &str, max_leases: Option<u32>) -> CliResult<Listing> {
    let found = client
        .participants(name, max_leases.unwrap_or(ALL_LEASES))
        .context(|| format!("cannot read {name}"))?;
    let entries: Vec<Entry> = found.into_iter().map(entry).collect();
    Ok(Listing {
        backend: "postgres",
        name: name.to_owned(),
        layout: Listing::layout_of(&entries),
        entries,
    })
}

fn entry(p: PgParticipant) -> Entry {
    let mut owner = p.user;
    if let Some(from) = p.client.filter(|c| !c.is_empty()) {
        owner = format!("{owner}@{from}");
    }
    if !p.application.is_empty() {
        owner = format!("{owner} ({})", p.application);
    }
    Entry {
        kind: p.kind.to_owned(),
        holds: Some(p.holds),
        id: match p.lease {
            Some(i) => format!("lease {i}, backend {}", p.backend_pid),
            None => format!("backend {}", p.backend_pid),
        },
        owner: Some(owner),
        session: Some(p.backend_pid.to_string()),
        token: p.token,
        age: p.waiting,
        expires_in: None,
    }
}
