//! MySQL and MariaDB (`--connect mysql://…` or `mariadb://…`) as the commands see them: the
//! Client from the global options, and `holders` from `IS_USED_LOCK` and the process list. The
//! session timeout is `--session-timeout`.

use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;
use parking_lot::Mutex;
use zklock::{AnyClient, MySqlClient, MySqlMutex};

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

/// MySQL, as the commands use it. The listing reads through a connection of its own, opened
/// on first use.
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let names = client.clone();
    let url = global.connect.clone();
    let timeout = global.connect_timeout;
    let reader: Mutex<Option<mysql::Conn>> = Mutex::new(None);
    let listing = move |name: &str, _: Option<u32>| {
        let lock = MySqlMutex::new(&names, name).context(|| format!("cannot use {name}"))?;
        let mut reader = reader.lock();
        if reader.is_none() {
            *reader = Some(open_reader(&url, timeout)?);
        }
        let conn = reader.as_mut().expect("just connected");
        listing(conn, name, lock.name())
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

/// A plain connection to `url` (which the Client checked already), without the Client's own
/// URL options.
fn open_reader(url: &str, timeout: Duration) -> CliResult<mysql::Conn> {
    let url = url.trim().replacen("mariadb://", "mysql://", 1);
    let url = url.split('?').next().unwrap_or_default();
    let opts = mysql::Opts::from_url(url).context(|| "not a MySQL URL".to_owned())?;
    let opts = mysql::OptsBuilder::from_opts(opts)
        .tcp_connect_timeout(Some(timeout))
        .read_timeout(Some(timeout))
        .write_timeout(Some(timeout));
    mysql::Conn::new(opts).context(|| "cannot connect to MySQL".to_owned())
}

/// The session that holds the mutex `name` (`GET_LOCK` name `lock_name`). The server shows no
/// queue of a `GET_LOCK` name, so waiters are not listed; a semaphore's or read-write lock's
/// names are not looked at.
fn listing(conn: &mut mysql::Conn, name: &str, lock_name: &str) -> CliResult<Listing> {
    let found: Option<(u64, String, String)> = conn
        .exec_first(
            "SELECT ID, USER, HOST FROM information_schema.PROCESSLIST \
             WHERE ID = IS_USED_LOCK(?)",
            (lock_name,),
        )
        .context(|| format!("cannot read {name}"))?;
    let holder: Option<u64> = match found {
        Some(_) => None,
        // A session the process list does not show this user (no PROCESS privilege).
        None => conn
            .exec_first("SELECT IS_USED_LOCK(?)", (lock_name,))
            .context(|| format!("cannot read {name}"))?
            .flatten(),
    };
    let entries: Vec<Entry> = match (found, holder) {
        (Some((id, user, host)), _) => vec![holder_entry(id, Some(format!("{user}@{host}")))],
        (None, Some(id)) => vec![holder_entry(id, None)],
        (None, None) => Vec::new(),
    };
    Ok(Listing {
        backend: "mysql",
        name: name.to_owned(),
        layout: Listing::layout_of(&entries),
        entries,
    })
}

fn holder_entry(connection: u64, owner: Option<String>) -> Entry {
    Entry {
        kind: "lock".to_owned(),
        holds: Some(true),
        id: format!("connection {connection}"),
        owner,
        session: Some(connection.to_string()),
        token: None,
        age: None,
        expires_in: None,
    }
}
