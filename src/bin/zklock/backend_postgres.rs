//! PostgreSQL (`--connect postgres://…`) as the commands see it: the Client from the global
//! options, and `holders` from `pg_locks` joined with `pg_stat_activity`. The session timeout is
//! `--session-timeout`.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use zklock::{AnyClient, PgClient, PgMutex};

use crate::args::Global;
#[cfg(feature = "tls")]
use crate::contender::tls_pems;
use crate::contender::{refuse_zookeeper_options, Site};
use crate::listing::{Entry, Listing};
use crate::{CliResult, Context, Failure};

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

/// PostgreSQL, as the commands use it. The listing reads through a connection of its own,
/// opened on first use.
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let sql = client.clone();
    let url = global.connect.clone();
    let timeout = global.connect_timeout;
    let reader: Mutex<Option<Reader>> = Mutex::new(None);
    Ok(Site {
        client: AnyClient::from(client),
        node: Box::new(move |name| {
            PgMutex::new(&sql, name).map_or_else(|_| name.to_owned(), |m| m.lock_sql())
        }),
        listing: Arc::new(move |name, max_leases| {
            let mut reader = reader.lock();
            if reader.is_none() {
                *reader = Some(Reader::connect(&url, timeout)?);
            }
            reader
                .as_ref()
                .expect("just connected")
                .listing(name, max_leases)
        }),
        lost: "its database session ended",
    })
}

/// Every session that holds or waits for one of the advisory locks of the name `$1` in this
/// database: the mutex's (and leader latch's) and the read-write lock's key
/// `hashtextextended($1, 0)`, taken exclusive or shared, and the semaphore's leases
/// `hashtextextended($1, i)` for `i` up to `$2`. Holders first, then waiters in the order they
/// began to wait (the server's queue).
///
/// `pg_stat_activity` shows a role without `pg_read_all_stats` the client address of its own
/// roles' sessions only: for another role's session it is left empty (the backend's start
/// tells the two apart), rather than calling a hidden address `local` as a Unix socket's is.
const VIEW: &str = "\
WITH keys AS (SELECT i AS seed, hashtextextended($1, i) AS key FROM generate_series(0, $2) AS i) \
SELECT k.seed, l.mode, l.granted, l.pid, a.usename::text, a.application_name, \
       CASE WHEN a.backend_start IS NOT NULL \
            THEN coalesce(host(a.client_addr) || ':' || a.client_port, 'local') END, \
       extract(epoch FROM now() - l.waitstart)::float8 \
FROM pg_locks l \
JOIN keys k ON ((l.classid::int8 << 32) | l.objid::int8) = k.key \
LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
ORDER BY l.granted DESC, l.waitstart NULLS FIRST, l.pid";

/// The most leases `holders` looks at when `--max-leases` is not given (a semaphore's most).
const ALL_LEASES: u32 = 10_000;

/// What `holders` reads through: a plain connection of its own (a reader holds no lock).
struct Reader {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    timeout: Duration,
}

impl Reader {
    /// A plain connection to `url`, which the Client checked already.
    fn connect(url: &str, timeout: Duration) -> CliResult<Reader> {
        let asks_tls = url.split(['?', '&']).any(|p| {
            matches!(
                p,
                "sslmode=require" | "sslmode=verify-ca" | "sslmode=verify-full"
            )
        });
        if asks_tls {
            return Err(Failure::new(
                "holders and watch read pg_locks on a connection of their own, which cannot use \
                 TLS yet: run them with sslmode=disable where the network allows, or query \
                 pg_locks with psql",
            ));
        }
        let config: tokio_postgres::Config = url
            .trim()
            .parse()
            .context(|| "not a PostgreSQL URL".to_owned())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context(|| "cannot start a runtime".to_owned())?;
        let client = runtime.block_on(async {
            let (client, connection) =
                tokio::time::timeout(timeout, config.connect(tokio_postgres::NoTls))
                    .await
                    .map_err(|_| Failure::new("cannot connect to PostgreSQL: timed out"))?
                    .context(|| "cannot connect to PostgreSQL".to_owned())?;
            tokio::spawn(connection);
            Ok::<_, Failure>(client)
        })?;
        Ok(Reader {
            runtime,
            client,
            timeout,
        })
    }

    fn listing(&self, name: &str, max_leases: Option<u32>) -> CliResult<Listing> {
        if name.is_empty() {
            return Err(Failure::new("a PostgreSQL lock name must not be empty"));
        }
        let leases = i32::try_from(max_leases.unwrap_or(ALL_LEASES)).unwrap_or(i32::MAX);
        let rows = self.runtime.block_on(async {
            tokio::time::timeout(self.timeout, self.client.query(VIEW, &[&name, &leases]))
                .await
                .map_err(|_| Failure::new(format!("cannot read {name}: no answer in time")))?
                .context(|| format!("cannot read {name}"))
        })?;
        let entries = rows.iter().map(entry).collect::<CliResult<Vec<_>>>()?;
        Ok(Listing {
            backend: "postgres",
            name: name.to_owned(),
            layout: Listing::layout_of(&entries),
            entries,
        })
    }
}

/// A row of [`VIEW`] as a listing's entry: the session is the server backend's process id,
/// the owner its role, address and application.
fn entry(r: &tokio_postgres::Row) -> CliResult<Entry> {
    let bad = |e: tokio_postgres::Error| Failure::from_error("an unexpected answer", &e);
    let seed: i32 = r.try_get(0).map_err(bad)?;
    let mode: String = r.try_get(1).map_err(bad)?;
    let kind = match (seed, mode.as_str()) {
        (0, "ShareLock") => "read",
        (0, _) => "lock",
        (_, _) => "lease",
    };
    let text = |i| -> CliResult<String> {
        Ok(r.try_get::<_, Option<String>>(i)
            .map_err(bad)?
            .unwrap_or_default())
    };
    let pid: i32 = r.try_get(3).map_err(bad)?;
    let (user, application, from) = (text(4)?, text(5)?, text(6)?);
    let mut owner = user;
    if !from.is_empty() {
        owner = format!("{owner}@{from}");
    }
    if !application.is_empty() {
        owner = format!("{owner} ({application})");
    }
    let waited = r.try_get::<_, Option<f64>>(7).map_err(bad)?;
    Ok(Entry {
        kind: kind.to_owned(),
        holds: Some(r.try_get(2).map_err(bad)?),
        id: if seed == 0 {
            format!("backend {pid}")
        } else {
            format!("lease {seed}, backend {pid}")
        },
        owner: Some(owner),
        session: Some(pid.to_string()),
        token: None,
        age: waited.and_then(|s| Duration::try_from_secs_f64(s).ok()),
        expires_in: None,
    })
}
