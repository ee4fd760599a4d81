//! The tables a [`MySqlClient`](super::MySqlClient) needs in its database, made ready at
//! connect: created if missing, or used as an administrator created them — and when the user
//! cannot use one, an error that names the table and the privilege it lacks.

use std::time::Duration;

use mysql::prelude::Queryable;

use super::mode::MySqlMode;
use super::session::Session;
use super::sql::{QUEUE, QUEUE_DDL, RECORDS, RECORDS_DDL, TOKENS, TOKENS_DDL};
use crate::core::error::{Error, Result};

/// `ER_TABLEACCESS_DENIED_ERROR`: "… command denied to user … for table …".
const TABLE_ACCESS_DENIED: &str = "error 1142,";
/// `ER_NO_SUCH_TABLE`.
const NO_SUCH_TABLE: &str = "error 1146,";

/// One table: its name, its DDL, and statements that touch nothing but need each privilege a
/// Client uses on it.
struct Table {
    name: &'static str,
    ddl: &'static str,
    uses: &'static [&'static str],
    privileges: &'static str,
}

const TOKENS_TABLE: Table = Table {
    name: TOKENS,
    ddl: TOKENS_DDL,
    uses: &[
        "SELECT token FROM zklock_tokens LIMIT 0",
        "INSERT INTO zklock_tokens SELECT * FROM zklock_tokens WHERE FALSE",
        "UPDATE zklock_tokens SET token = token WHERE FALSE",
    ],
    privileges: "SELECT, INSERT, UPDATE",
};

const RECORDS_TABLE: Table = Table {
    name: RECORDS,
    ddl: RECORDS_DDL,
    uses: &[
        "SELECT version FROM zklock_lock_record LIMIT 0",
        "INSERT INTO zklock_lock_record SELECT * FROM zklock_lock_record WHERE FALSE",
        "UPDATE zklock_lock_record SET version = version WHERE FALSE",
    ],
    privileges: "SELECT, INSERT, UPDATE",
};

const QUEUE_TABLE: Table = Table {
    name: QUEUE,
    ddl: QUEUE_DDL,
    uses: &[
        "SELECT since FROM zklock_lock_queue LIMIT 0",
        "INSERT INTO zklock_lock_queue SELECT * FROM zklock_lock_queue WHERE FALSE",
        "UPDATE zklock_lock_queue SET since = since WHERE FALSE",
        "DELETE FROM zklock_lock_queue WHERE FALSE",
    ],
    privileges: "SELECT, INSERT, UPDATE, DELETE",
};

/// Makes the tables of `mode` ready on `session`, each request answered within `op`: each is
/// created if missing; a user without `CREATE` uses the one an administrator created. The
/// error of a table that is missing and cannot be created, or that the user cannot use, names
/// the table and the privilege.
pub(crate) fn prepare(session: &Session, mode: MySqlMode, op: Duration) -> Result<()> {
    let tables: &[Table] = match mode {
        MySqlMode::GetLock => &[TOKENS_TABLE],
        MySqlMode::Table => &[RECORDS_TABLE, QUEUE_TABLE],
    };
    let db = session.with(Some(op), op, |c| {
        c.query_first::<Option<String>, _>("SELECT DATABASE()")
    })?;
    let db = db.flatten().unwrap_or_default();
    for table in tables {
        let created = session.with(Some(op), op, |c| c.query_drop(table.ddl));
        let cannot_create = match created {
            Ok(()) => None,
            Err(Error::MySql(why)) if why.contains(TABLE_ACCESS_DENIED) => Some(why),
            Err(Error::MySql(why)) => {
                return Err(Error::MySql(format!(
                    "cannot create the lock table {}: {why}",
                    table.name
                )))
            }
            Err(e) => return Err(e),
        };
        for sql in table.uses {
            match session.with(Some(op), op, |c| c.query_drop(sql)) {
                Ok(()) => {}
                Err(Error::MySql(why)) if why.contains(NO_SUCH_TABLE) => {
                    return Err(Error::MySql(format!(
                        "the lock table {db}.{} is missing and this user may not create it \
                         ({}): grant it CREATE on {db}, or have an administrator create the \
                         table (its CREATE TABLE statement is in the MySQL backend's docs) and \
                         grant this user {} on it",
                        table.name,
                        cannot_create.as_deref().unwrap_or(&why),
                        table.privileges
                    )))
                }
                Err(Error::MySql(why)) if why.contains(TABLE_ACCESS_DENIED) => {
                    return Err(Error::MySql(format!(
                        "this user cannot use the lock table {db}.{}: {why}; it needs {} on it \
                         (GRANT {} ON {db}.{} TO …)",
                        table.name, table.privileges, table.privileges, table.name
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
