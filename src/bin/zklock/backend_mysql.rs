//! MySQL and MariaDB (`--connect mysql://…` or `mariadb://…`) as the commands see them: the
//! Client from the global options, and `holders` from the Client's participants (the holding
//! and waiting connections, or the table mode's lease record). The session timeout is
//! `--session-timeout`.

use std::sync::Arc;

use zklock::mysql::{MySqlMutex, MySqlParticipant};
use zklock::{AnyClient, MySqlClient};

use crate::args::Global;
use crate::contender::{refuse_zookeeper_options, Site};
use crate::listing::{Entry, Listing};
use crate::{CliResult, Context};

/// A connected MySQL Client from the global options.
pub fn connect(global: &Global) -> CliResult<MySqlClient> {
    refuse_zookeeper_options(global, "MySQL", "mysql://user:PASSWORD@host/db")?;
    MySqlClient::builder(&global.connect)
        .session_timeout(global.session_timeout)
        .connect_timeout(global.connect_timeout)
        .connect()
        .context(String::new) // the error names the server and says it cannot connect
}

/// MySQL, as the commands use it. The listing reads through the Client
/// ([`MySqlClient::participants`]).
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let names = client.clone();
    let listing = move |name: &str, max_leases: Option<u32>| {
        let participants = names
            .participants(name, max_leases.unwrap_or(ALL_LEASES))
            .context(|| format!("cannot read {name}"))?;
        let entries: Vec<Entry> = participants.into_iter().map(entry).collect();
        Ok(Listing {
            backend: "mysql",
            name: name.to_owned(),
            layout: Listing::layout_of(&entries),
            entries,
        })
    };
    let sql = client.clone();
    Ok(Site {
        client: AnyClient::from(client),
        node: Box::new(move |name| {
            MySqlMutex::new(&sql, name).map_or_else(|_| name.to_owned(), |m| m.lock_sql())
        }),
        listing: Arc::new(listing),
        lost: "its database connection ended",
    })
}

/// The most leases `holders` looks at when `--max-leases` is not given (a semaphore's most:
/// ten `IS_USED_LOCK` statements of a hundred names).
const ALL_LEASES: u32 = 1_000;

/// One row of the listing: a connection that holds or waits (`GET_LOCK` mode), or the lease
/// record (table mode).
fn entry(p: MySqlParticipant) -> Entry {
    let owner = match (&p.user, &p.client, &p.owner) {
        (Some(user), Some(client), _) => Some(format!("{user}@{client}")),
        (Some(user), None, _) => Some(user.clone()),
        (None, _, owner) => owner.clone(),
    };
    Entry {
        kind: p.kind.to_owned(),
        holds: Some(p.holds),
        id: match (p.connection, p.lease) {
            (Some(c), _) => format!("connection {c}"),
            (None, Some(lease)) => format!("lease {lease} record"),
            (None, None) => "lease record".to_owned(),
        },
        owner,
        session: p.connection.map(|c| c.to_string()),
        token: p.token,
        age: p.waiting,
        expires_in: p.expires_in,
    }
}
