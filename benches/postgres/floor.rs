//! The floor: PgMutex's own statements (this bench includes the library's `sql.rs`), prepared
//! once as a PgClient's sessions prepare them, on one bare tokio-postgres connection per
//! session, driven by a runtime on the session's own thread — no pool, no heartbeat, no lease,
//! no re-entrancy. And the plainer floor of what a hand-written client does:
//! `pg_advisory_lock(hashtextextended(name, 0))` and its unlock, no token, each an unnamed
//! statement (parsed and planned at every use).

use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};

use crate::common::Res;
use crate::sql;

/// Which statements a floor session runs.
#[derive(Clone, Copy)]
pub enum Sql {
    /// PgMutex's: the lock statement (`lock_timeout` set in it, the own-session check), then
    /// the unlock.
    Same,
    /// `pg_advisory_lock` and `pg_advisory_unlock` alone.
    Plain,
}

/// Where a session's connection is driven.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Driven {
    /// On the session's own thread (a current-thread runtime): no thread hop.
    Here,
    /// On an I/O thread of its own (a one-worker runtime), the session's thread waiting for
    /// each answer as a PgClient's caller does: two thread hops per round trip.
    IoThread,
}

/// One session: a connection, driven as `Driven` says.
pub struct Session {
    runtime: Runtime,
    client: tokio_postgres::Client,
    /// The lock and the unlock statements, prepared.
    prepared: [tokio_postgres::Statement; 2],
    marker: i64,
    name: String,
    sql: Sql,
}

impl Session {
    /// Opens a session as `application_name` and adds its marker as PgClient's sessions do.
    pub fn open(
        url: &str,
        application_name: &str,
        name: &str,
        sql: Sql,
        driven: Driven,
    ) -> Res<Session> {
        let runtime = match driven {
            Driven::Here => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            Driven::IoThread => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?,
        };
        let mut config: tokio_postgres::Config = url.parse()?;
        config.application_name(application_name);
        let marker = fastrand::i32(1..);
        let (client, prepared) = runtime.block_on(async {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            client
                .query_typed(sql::OPEN, &[(&marker as &(dyn ToSql + Sync), Type::INT4)])
                .await?;
            let lock = client
                .prepare_typed(
                    sql::EXCLUSIVE.lock,
                    &[Type::TEXT, Type::INT8, Type::INT8, Type::TEXT],
                )
                .await?;
            let unlock = client
                .prepare_typed(sql::EXCLUSIVE.unlock, &[Type::TEXT, Type::INT8])
                .await?;
            Ok::<_, tokio_postgres::Error>((client, [lock, unlock]))
        })?;
        Ok(Session {
            runtime,
            client,
            prepared,
            marker: i64::from(marker),
            name: name.to_owned(),
            sql,
        })
    }

    /// Waits for the lock; the token column of the lock statement with [`Sql::Same`].
    pub fn lock(&mut self) -> Res<Option<i64>> {
        let name: &(dyn ToSql + Sync) = &self.name;
        let marker: &(dyn ToSql + Sync) = &self.marker;
        let seed: &(dyn ToSql + Sync) = &0_i64;
        let no_limit: &(dyn ToSql + Sync) = &"0";
        let client = &self.client;
        self.runtime.block_on(async {
            match self.sql {
                Sql::Same => {
                    let params = [name, marker, seed, no_limit];
                    let rows = client.query(&self.prepared[0], &params).await?;
                    let row = rows.into_iter().next().ok_or("no row")?;
                    if !row.try_get::<_, bool>(2)? {
                        return Err("not the session's own".into());
                    }
                    // Null: a mutex reads its token when asked for.
                    Ok(row.try_get::<_, Option<i64>>(1)?)
                }
                Sql::Plain => {
                    client
                        .query_typed(
                            "SELECT pg_advisory_lock(hashtextextended($1, 0))",
                            &[(name, Type::TEXT)],
                        )
                        .await?;
                    Ok(None)
                }
            }
        })
    }

    pub fn unlock(&mut self) -> Res<()> {
        let name: &(dyn ToSql + Sync) = &self.name;
        let seed: &(dyn ToSql + Sync) = &0_i64;
        let client = &self.client;
        let unlocked = self.runtime.block_on(async {
            match self.sql {
                Sql::Same => client.query(&self.prepared[1], &[name, seed]).await,
                Sql::Plain => {
                    client
                        .query_typed(
                            "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                            &[(name, Type::TEXT)],
                        )
                        .await
                }
            }
        })?;
        match unlocked.first().map(|r| r.try_get::<_, bool>(0)) {
            Some(Ok(true)) => Ok(()),
            other => Err(format!("unlock: {other:?}").into()),
        }
    }
}
