//! The tables a [`MySqlClient`](super::MySqlClient) needs in its database, made ready at
//! connect: created if missing, given the columns a table made by an earlier version lacks, or
//! used as an administrator created them — and when the user cannot use one, an error that
//! names the table and the privilege it lacks, or the statement that adds its columns.

use std::time::Duration;

use mysql::prelude::Queryable;

use super::mode::MySqlMode;
use super::session::Session;
use super::sql::{MARK_COLUMNS, QUEUE, QUEUE_DDL, RECORDS, RECORDS_DDL, TOKENS, TOKENS_DDL};
use crate::core::error::{Error, Result};

/// `ER_TABLEACCESS_DENIED_ERROR`: "… command denied to user … for table …".
const TABLE_ACCESS_DENIED: &str = "error 1142,";
/// `ER_NO_SUCH_TABLE`.
const NO_SUCH_TABLE: &str = "error 1146,";
/// `ER_BAD_FIELD_ERROR`: "Unknown column …".
const NO_SUCH_COLUMN: &str = "error 1054,";
/// `ER_DUP_FIELDNAME`: "Duplicate column name …".
const DUPLICATE_COLUMN: &str = "error 1060,";

/// One table: its name, its DDL, statements that touch nothing but need each privilege a
/// Client uses on it (the first names every column that was added later), and the columns
/// added later, each with the statement that adds it.
struct Table {
    name: &'static str,
    ddl: &'static str,
    uses: &'static [&'static str],
    privileges: &'static str,
    added: &'static [(&'static str, &'static str)],
}

const TOKENS_TABLE: Table = Table {
    name: TOKENS,
    ddl: TOKENS_DDL,
    uses: &[
        "SELECT token, holder, marked FROM zklock_tokens LIMIT 0",
        "INSERT INTO zklock_tokens SELECT * FROM zklock_tokens WHERE FALSE",
        "UPDATE zklock_tokens SET token = token WHERE FALSE",
    ],
    privileges: "SELECT, INSERT, UPDATE",
    added: &MARK_COLUMNS,
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
    added: &[],
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
    added: &[],
};

/// Makes the tables of `mode` ready on `session`, each request answered within `op`: each is
/// created if missing, and given the columns it lacks (a table made by an earlier version); a
/// user without `CREATE` uses the one an administrator created. The error of a table that is
/// missing and cannot be created, or that the user cannot use, names the table and the
/// privilege; that of a table that lacks columns the user may not add gives the statement
/// that adds them.
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
        for (i, sql) in table.uses.iter().enumerate() {
            let mut used = session.with(Some(op), op, |c| c.query_drop(sql));
            if i == 0 && matches!(&used, Err(Error::MySql(why)) if why.contains(NO_SUCH_COLUMN)) {
                add_columns(session, table, &db, op)?;
                used = session.with(Some(op), op, |c| c.query_drop(sql));
            }
            match used {
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

/// Adds the columns of `table` added after its first version, on a table that lacks them: one
/// `ALTER TABLE` per column (a column already there is left as it is, on MySQL as on
/// MariaDB). When the user may not, the error gives the statement an administrator runs.
fn add_columns(session: &Session, table: &Table, db: &str, op: Duration) -> Result<()> {
    for (column, alter) in table.added {
        match session.with(Some(op), op, |c| c.query_drop(alter)) {
            Ok(()) => tracing::info!("zklock: added the column {column} to {db}.{}", table.name),
            Err(Error::MySql(why)) if why.contains(DUPLICATE_COLUMN) => {}
            Err(Error::MySql(why)) => {
                let columns: Vec<&str> = table.added.iter().map(|(c, _)| *c).collect();
                let statement = table
                    .added
                    .iter()
                    .map(|(_, alter)| {
                        alter.replacen(table.name, &format!("{db}.{}", table.name), 1)
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Error::MySql(format!(
                    "the lock table {db}.{} lacks the columns {} of this version, and this user \
                     may not add them ({why}): grant it ALTER on it, or have an administrator \
                     run {statement}",
                    table.name,
                    columns.join(" and "),
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
