//! The opt-in table `zklock_tokens`: where a holding session records the fencing token it read,
//! so that [`PgClient::participants`](super::PgClient::participants) can show every holder's
//! token. zklock never creates it; a Client that finds it (when it connects) writes to it in
//! the statements that read a token and let go of a hold, so that no statement and no round
//! trip is added. Without it the statements are the plain ones of `sql.rs`.
//!
//! A row is one hold's token: the lock's key (`hashtextextended(NAME, seed)`), the holding
//! session (`pg_backend_pid()` and its `backend_start`, so that a pid the server has since
//! given to another session never matches it) and whether the hold is shared (a read half),
//! with the token. A hold that recorded its token deletes its row when it lets go; a session
//! that ended holding leaves its row, which is never shown (its session is gone) and is
//! deleted by the next session that records a token on the same key.

use super::sql::{self, Statements, EXCLUSIVE_WITH_TOKEN, TRY_ANY};

/// Columns added to the statement a Client runs when it connects: the schema-qualified name
/// (quoted as an identifier) of the table `zklock_tokens` when the connecting session's
/// `search_path` finds it (as an unqualified name in a query would) and it is not a temporary
/// table,
/// whether the Client's role may read it, and whether it may write it (insert, update and
/// delete). Null, null, null without it.
pub(crate) const FIND: &str = "\
CASE WHEN c.oid IS NOT NULL THEN format('%I.%I', n.nspname, c.relname) END, \
has_table_privilege(c.oid, 'SELECT'), \
has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT') \
AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE') \
FROM (SELECT to_regclass('zklock_tokens') AS found) AS looked \
LEFT JOIN pg_class c ON c.oid = looked.found AND c.relpersistence <> 't' \
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace";

/// The table as a Client found it.
pub(crate) struct Table {
    /// Its schema-qualified name, quoted: the statements work whatever a session's
    /// `search_path` is.
    pub(crate) name: String,
    /// The statements that write it, when the Client's role may.
    pub(crate) writes: Option<Writes>,
}

/// The statements of a Client that records its tokens: the plain ones of `sql.rs` (and the
/// semaphore's), each with the table's write added in the same statement.
pub(crate) struct Writes {
    /// [`sql::TOKEN`], recording the token read (`$2` the name, `$3` the seed, `$4` whether
    /// the hold is shared).
    pub(crate) token: String,
    /// [`EXCLUSIVE_WITH_TOKEN`]'s lock and one attempt (the leader latch's, a lease's queued
    /// wait), recording the token of the grant.
    pub(crate) lock: String,
    pub(crate) try_lock: String,
    /// The semaphore's attempt on every key, recording the token of the lease taken.
    pub(crate) try_any: String,
    /// The exclusive and the shared unlock, deleting the hold's row.
    pub(crate) unlock: String,
    pub(crate) unlock_shared: String,
}

impl Table {
    /// The table named `name` (schema-qualified, quoted), with its statements if `writable`.
    pub(crate) fn new(name: String, writable: bool) -> Table {
        let writes = writable.then(|| {
            let key = "hashtextextended($1, $3)";
            Writes {
                token: recorded(&name, sql::TOKEN, "hashtextextended($2, $3)", "$4"),
                lock: recorded(&name, EXCLUSIVE_WITH_TOKEN.lock, key, "false"),
                try_lock: recorded(&name, EXCLUSIVE_WITH_TOKEN.try_lock, key, "false"),
                try_any: recorded(&name, TRY_ANY, "hashtextextended($1, k)", "false"),
                unlock: forgetting(&name, sql::EXCLUSIVE.unlock, "false"),
                unlock_shared: forgetting(&name, sql::SHARED.unlock, "true"),
            }
        });
        Table { name, writes }
    }

    /// The lock statement of `key` (the plain one unless the token comes with the grant).
    pub(crate) fn lock(&self, key: &Statements) -> Option<&str> {
        let writes = self.writes.as_ref()?;
        key.token.then_some(writes.lock.as_str())
    }

    /// The one-attempt statement of `key`.
    pub(crate) fn try_lock(&self, key: &Statements) -> Option<&str> {
        let writes = self.writes.as_ref()?;
        key.token.then_some(writes.try_lock.as_str())
    }

    /// The unlock statement of `key`.
    pub(crate) fn unlock(&self, key: &Statements) -> Option<&str> {
        let writes = self.writes.as_ref()?;
        Some(if key.shared {
            &writes.unlock_shared
        } else {
            &writes.unlock
        })
    }
}

/// `plain` (a statement whose columns include `pid`, `xid` and `own`) with its token recorded
/// in `table` under the key `key` (an SQL expression) and `shared` (one too), in the same
/// statement: the plain statement is a CTE, computed once, that the write reads, so the write
/// follows the grant and the token. Nothing is written unless the statement read a token on
/// the session's own server session.
///
/// The same write deletes the key's rows of sessions that are gone: no live session has their
/// pid, or the one that has it started at another time (a role that may not see another
/// role's `backend_start` keeps that role's rows: they are deleted by a session that may, and
/// are never shown to one that may not). Rows another statement is deleting are skipped, not
/// waited for (`SKIP LOCKED`), so two such writes never wait for each other. So after a write
/// a key keeps at most one row per live session and mode, and the table holds no more than
/// that for each key written since its holders' sessions ended.
///
/// The write makes the transaction one that wrote WAL, so its commit is flushed as the
/// logical message of the plain statement makes it. The message stays: the token's
/// durability then does not depend on the table (an `UNLOGGED` table, or a trigger or rule
/// that writes nothing, would leave an assigned transaction id to an asynchronous commit), and
/// its few bytes go in the same flush.
fn recorded(table: &str, plain: &str, key: &str, shared: &str) -> String {
    format!(
        "WITH answer AS ({plain}), \
         recorded AS (INSERT INTO {table} (key, pid, backend_start, shared, token) \
         SELECT {key}, pid, \
         (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())), \
         {shared}, xid FROM answer \
         WHERE own AND xid IS NOT NULL \
         ON CONFLICT (key, pid, shared) DO UPDATE \
         SET backend_start = excluded.backend_start, token = excluded.token), \
         pruned AS (DELETE FROM {table} WHERE ctid = ANY (ARRAY(\
         SELECT r.ctid FROM {table} AS r, answer \
         WHERE answer.own AND answer.xid IS NOT NULL AND r.key = {key} AND r.pid <> answer.pid \
         AND NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = r.pid \
         AND (a.backend_start IS NULL OR a.backend_start = r.backend_start)) \
         FOR UPDATE OF r SKIP LOCKED))) \
         SELECT * FROM answer"
    )
}

/// `unlock` (`SELECT pg_advisory_unlock…(hashtextextended($1, $2))`) deleting the session's
/// row for that key and mode (`shared`) in the same statement. The deletion is committed
/// without waiting for its flush (`synchronous_commit` off for this transaction): lost in a
/// crash of the server, it leaves a row whose session is gone too, which is never shown. A
/// hold that recorded nothing deletes nothing and writes nothing.
fn forgetting(table: &str, unlock: &str, shared: &str) -> String {
    format!(
        "WITH forgotten AS (DELETE FROM {table} WHERE key = hashtextextended($1, $2) \
         AND pid = pg_backend_pid() AND shared = {shared}) \
         {unlock}, set_config('synchronous_commit', 'off', true)"
    )
}

/// The participants' join with the table (see `participants.rs`): a holder's row, of the
/// live session that holds (same pid and `backend_start`) in the same mode.
pub(crate) fn join(table: &str) -> String {
    format!(
        "LEFT JOIN {table} AS t ON l.granted AND t.key = k.key AND t.pid = l.pid \
         AND t.shared = (l.mode = 'ShareLock') AND t.backend_start = a.backend_start "
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_names_the_table_and_keeps_the_plain_statement() {
        let table = Table::new("\"app\".\"zklock_tokens\"".into(), true);
        let writes = table.writes.as_ref().expect("writes");
        for (recorded, plain) in [
            (&writes.token, sql::TOKEN),
            (&writes.lock, EXCLUSIVE_WITH_TOKEN.lock),
            (&writes.try_lock, EXCLUSIVE_WITH_TOKEN.try_lock),
            (&writes.try_any, TRY_ANY),
        ] {
            assert!(recorded.contains(plain), "{recorded}");
            assert!(recorded.contains("INSERT INTO \"app\".\"zklock_tokens\""));
            assert!(recorded.contains("SKIP LOCKED"));
        }
        assert!(writes.unlock.contains(sql::EXCLUSIVE.unlock));
        assert!(writes.unlock_shared.contains(sql::SHARED.unlock));
        assert!(writes.unlock_shared.contains("shared = true"));
        assert!(Table::new("t".into(), false).writes.is_none());
    }

    #[test]
    fn only_a_token_statement_records() {
        let table = Table::new("t".into(), true);
        assert!(table.lock(&sql::EXCLUSIVE).is_none());
        assert!(table.try_lock(&sql::SHARED).is_none());
        assert!(table.lock(&EXCLUSIVE_WITH_TOKEN).is_some());
        assert!(table
            .unlock(&sql::SHARED)
            .unwrap()
            .contains("shared = true"));
        assert!(Table::new("t".into(), false)
            .unlock(&sql::EXCLUSIVE)
            .is_none());
    }
}
