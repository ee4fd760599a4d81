//! The SQL of the MySQL locks, in one place: the names (how a lock name becomes a `GET_LOCK`
//! name and a lease record's key), the fencing tokens' table and its bump, and the table
//! mode's lease records. Nothing here depends on the rest of the crate.

use std::time::Duration;

use crate::core::error::{Error, Result};

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// The longest name that is its own key, in bytes: MySQL's limit of a `GET_LOCK` name (64
/// characters), which MariaDB's (in bytes) exceeds for these one-byte characters.
const MAX_PLAIN: usize = 64;

/// Whether `name` is its own key: 1 to 64 bytes of lower-case ASCII letters, digits and
/// `_-.:;/`, other than 64 hex digits (the form of a hashed key). Every server compares these
/// byte for byte: no case to fold (MySQL folds `GET_LOCK` names), no trailing space for a
/// pad-space collation to drop, no NUL byte for MariaDB to cut the name at.
fn plain(name: &str) -> bool {
    let hash_like = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
    !name.is_empty()
        && name.len() <= MAX_PLAIN
        && !hash_like
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.:;/".contains(&b))
}

/// The key of `name` — its `GET_LOCK` name, its lease record's and tokens' row — as an SQL
/// expression: the name itself (quoted) when it is [plain](plain), else the 64 hex digits of
/// the SHA-256 of its UTF-8 bytes, computed by the server: `SHA2('NAME', 256)` for printable
/// ASCII without a quote or backslash, `SHA2(X'…', 256)` of its bytes for any other. So two
/// distinct names are two keys (a plain key never has the form of a hash), and every key is
/// 1 to 64 ASCII characters, within MySQL's and MariaDB's limits.
pub(crate) fn key_sql(name: &str) -> String {
    if plain(name) {
        format!("'{name}'")
    } else if name
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'\'' && b != b'\\')
    {
        format!("SHA2('{name}', 256)")
    } else {
        let hex: String = name.bytes().map(|b| format!("{b:02X}")).collect();
        format!("SHA2(X'{hex}', 256)")
    }
}

/// A name is any text of 1 to [`MAX_NAME`] bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("a MySQL lock name must not be empty"));
    }
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a MySQL lock name is at most {MAX_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

/// The table of fencing tokens: one counter row per lock key, bumped when a mutex's token is
/// first asked for, and in the grant of a semaphore lease, a read-write half or a latch term.
/// Each bump marks the row with the bumping connection (`holder`) and the database's UTC time
/// (`marked`), so that a reader can tell whose the count is: the holder's of the key, if the
/// mark names its connection and was made since the server started (connection ids start
/// again at a restart).
pub(crate) const TOKENS: &str = "zklock_tokens";

/// The fencing tokens' table, created at connect if missing.
pub(crate) const TOKENS_DDL: &str = "CREATE TABLE IF NOT EXISTS zklock_tokens (\
    name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
    token BIGINT UNSIGNED NOT NULL, holder BIGINT UNSIGNED NULL, marked DATETIME(6) NULL) \
    ENGINE=InnoDB";

/// The columns of the mark, each with the statement that adds it to a tokens' table made
/// before it had them.
pub(crate) const MARK_COLUMNS: [(&str, &str); 2] = [
    (
        "holder",
        "ALTER TABLE zklock_tokens ADD COLUMN holder BIGINT UNSIGNED NULL",
    ),
    (
        "marked",
        "ALTER TABLE zklock_tokens ADD COLUMN marked DATETIME(6) NULL",
    ),
];

/// The statement that bumps the token of `key` (an SQL expression) when `when` (an SQL
/// condition) holds, leaving it in `LAST_INSERT_ID()` and marking the row with this
/// connection and the time.
pub(crate) fn bump_sql(key: &str, when: &str) -> String {
    format!(
        "INSERT INTO zklock_tokens (name, token, holder, marked) \
         SELECT {key}, LAST_INSERT_ID(1), CONNECTION_ID(), UTC_TIMESTAMP(6) FROM DUAL \
         WHERE {when} ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1), \
         holder = CONNECTION_ID(), marked = UTC_TIMESTAMP(6)"
    )
}

/// Bumps the token of the name in `@zklock_key` when `@zklock_got` is 1 or more (granted),
/// leaving it in `LAST_INSERT_ID()` (a statement with its `;`).
pub(crate) fn bump_granted() -> String {
    format!("{};", bump_sql("@zklock_key", "@zklock_got >= 1"))
}

/// Bumps the token of `key` (an SQL expression) if this session holds its `GET_LOCK`, in two
/// statements: the last row is (1, the token), or (0 or `NULL`, `NULL`) when the session does
/// not hold it (and bumped nothing).
pub(crate) fn token_sql(key: &str) -> String {
    format!(
        "{}; SELECT IS_USED_LOCK({key}) = CONNECTION_ID(), \
         IF(IS_USED_LOCK({key}) = CONNECTION_ID(), LAST_INSERT_ID(), NULL)",
        bump_sql(key, &format!("IS_USED_LOCK({key}) = CONNECTION_ID()"))
    )
}

/// The statements that release `key` (an SQL expression) and clear this connection's mark on
/// its token: the first row is `RELEASE_LOCK`'s answer.
pub(crate) fn release_unmark_sql(key: &str) -> String {
    format!(
        "SELECT RELEASE_LOCK({key}); UPDATE zklock_tokens SET holder = NULL \
         WHERE name = {key} AND holder = CONNECTION_ID()"
    )
}

/// The statement that reads `columns` (SQL expressions, such as `IS_USED_LOCK` of some keys)
/// and, in the same statement, the mark of the token of `key` (an SQL expression): its row is
/// the columns, then the mark's connection, the token, and whether the mark was made since
/// the server started, by the server's `uptime` read before (whole seconds, counted from the
/// whole second it started in). A mark of the server's first second is not believed either:
/// its start is known to the second only, and a mark in that second may be the previous run's.
/// `NULL`s for a key without a token.
pub(crate) fn marked_token_sql(columns: &str, key: &str, uptime: u64) -> String {
    format!(
        "SELECT {columns}, t.holder, t.token, \
         t.marked >= UTC_TIMESTAMP() - INTERVAL {uptime} SECOND + INTERVAL 1 SECOND \
         FROM (SELECT 1) AS one LEFT JOIN zklock_tokens t ON t.name = {key}"
    )
}

/// The lease table.
pub(crate) const RECORDS: &str = "zklock_lock_record";

/// The lease table, created at connect if missing. The name is the `GET_LOCK` mode's key (the
/// name up to 64 characters, `SHA2(name, 256)` beyond); the primary key makes it unique (and
/// Galera wants a primary key on every table).
pub(crate) const RECORDS_DDL: &str = "CREATE TABLE IF NOT EXISTS zklock_lock_record (\
    lock_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
    lock_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
    expire_time DATETIME(6) NOT NULL, \
    version BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB";

/// The table mode's queue: one row per waiter that found a lock held, so that the waiter that
/// has waited longest takes it next (see [`look_sql`]).
pub(crate) const QUEUE: &str = "zklock_lock_queue";

/// The queue, created at connect in the table mode if missing. A row counts while its expiry
/// (by the database's clock) has not passed: its waiter refreshes it as it polls.
pub(crate) const QUEUE_DDL: &str = "CREATE TABLE IF NOT EXISTS zklock_lock_queue (\
    lock_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
    waiter VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
    since DATETIME(6) NOT NULL, \
    expire_time DATETIME(6) NOT NULL, \
    PRIMARY KEY (lock_name, waiter)) ENGINE=InnoDB";

/// The look of `owner` at the record `key`: its version, owner, whether it has expired, and
/// how many live queue rows are ahead of `owner`'s — rows of other waiters, not of the
/// record's owner (a holder's row left behind), queued earlier (by `since`, then by waiter);
/// every live row of another when `owner` has none. No row when the record is missing.
pub(crate) fn look_sql(key: &str, owner: &str) -> String {
    format!(
        "SELECT r.version, r.lock_owner, r.expire_time < NOW(6), \
         (SELECT COUNT(*) FROM {QUEUE} q WHERE q.lock_name = r.lock_name \
         AND q.waiter <> '{owner}' AND q.waiter <> r.lock_owner AND q.expire_time >= NOW(6) \
         AND (m.since IS NULL OR q.since < m.since \
         OR (q.since = m.since AND q.waiter < m.waiter))) \
         FROM {RECORDS} r LEFT JOIN {QUEUE} m \
         ON m.lock_name = r.lock_name AND m.waiter = '{owner}' \
         WHERE r.lock_name = {key}"
    )
}

/// The statement that queues `owner` for `key` (its `since` now) or, when queued, keeps its row
/// live for `live` more.
pub(crate) fn queue_sql(key: &str, owner: &str, live: Duration) -> String {
    let micros = live.as_micros();
    format!(
        "INSERT INTO {QUEUE} (lock_name, waiter, since, expire_time) \
         VALUES ({key}, '{owner}', NOW(6), NOW(6) + INTERVAL {micros} MICROSECOND) \
         ON DUPLICATE KEY UPDATE expire_time = NOW(6) + INTERVAL {micros} MICROSECOND"
    )
}

/// The statements that take the queue rows `rows` (key, waiter) out, with the rows of their
/// names that have been dead for a minute (waiters that crashed).
pub(crate) fn dequeue_sql(rows: &[(String, String)]) -> String {
    rows.iter()
        .map(|(key, waiter)| {
            format!(
                "DELETE FROM {QUEUE} WHERE lock_name = {key} AND (waiter = '{waiter}' \
                 OR expire_time < NOW(6) - INTERVAL 60 SECOND)"
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The expiry a released record gets: before any `NOW(6)`, and telling a release from an
/// expiry to whoever reads the table.
pub(crate) const RELEASED: &str = "'1970-01-01 00:00:00'";

/// One table lease: the record's name (an SQL expression), owner and version.
#[derive(Clone)]
pub(crate) struct Record {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) version: u64,
}

/// The statements that let go of `records` (one `UPDATE` each, in one request).
pub(crate) fn expire_sql(records: &[Record]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "UPDATE {RECORDS} SET expire_time = {RELEASED} WHERE lock_name = {} \
                 AND lock_owner = '{}' AND version = {}",
                r.key, r.owner, r.version
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The statement that renews `record` for `lease`, if it is still ours and has not expired.
pub(crate) fn renew_sql(record: &Record, lease: Duration) -> String {
    format!(
        "UPDATE {RECORDS} SET expire_time = NOW(6) + INTERVAL {} MICROSECOND \
         WHERE lock_name = {} AND lock_owner = '{}' AND version = {} AND expire_time >= NOW(6)",
        lease.as_micros(),
        record.key,
        record.owner,
        record.version
    )
}

/// The statement that reads the database's clock in µs since the epoch (every zklock session
/// is in UTC).
pub(crate) const NOW_SQL: &str = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6))";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("it's ✓").is_ok());
    }

    #[test]
    fn keys_are_plain_names_or_their_sha2() {
        assert_eq!(key_sql("ledger"), "'ledger'");
        assert_eq!(key_sql("jobs/nightly;3"), "'jobs/nightly;3'");
        assert_eq!(key_sql(&"x".repeat(64)), format!("'{}'", "x".repeat(64)));
        assert_eq!(
            key_sql(&"x".repeat(65)),
            format!("SHA2('{}', 256)", "x".repeat(65))
        );
        // Upper case, a space, a quote: hashed, printable ASCII as text.
        assert_eq!(key_sql("Ledger"), "SHA2('Ledger', 256)");
        assert_eq!(key_sql("x "), "SHA2('x ', 256)");
        assert_eq!(key_sql("it's"), "SHA2(X'69742773', 256)");
        assert_eq!(key_sql("a\\b"), "SHA2(X'615C62', 256)");
        // NUL and multi-byte characters: their bytes.
        assert_eq!(key_sql("a\0x"), "SHA2(X'610078', 256)");
        assert_eq!(key_sql("é"), "SHA2(X'C3A9', 256)");
        // A name of the form of a hash is hashed, so it is not another name's key.
        let hex = "ee69eb4afc76aae085cdfb153ca55d587b819e19d84145b5438be7f2bc25ec83";
        assert_eq!(key_sql(hex), format!("SHA2('{hex}', 256)"));
        assert_eq!(key_sql(&hex[1..]), format!("'{}'", &hex[1..]));
    }

    #[test]
    fn every_bump_marks_its_connection_and_time() {
        for sql in [
            bump_granted(),
            bump_sql("@zklock_key", "@zklock_slot > 0"),
            token_sql("'ledger'"),
        ] {
            let (insert, update) = sql.split_once("ON DUPLICATE KEY UPDATE").unwrap();
            assert!(
                insert.contains("(name, token, holder, marked)")
                    && insert.contains("CONNECTION_ID(), UTC_TIMESTAMP(6)"),
                "{sql}"
            );
            assert!(
                update.contains("holder = CONNECTION_ID(), marked = UTC_TIMESTAMP(6)"),
                "{sql}"
            );
        }
        // The release comes first: its answer is the first row, whatever the mark's update does.
        let release = release_unmark_sql("'ledger'");
        assert!(
            release.starts_with("SELECT RELEASE_LOCK('ledger');"),
            "{release}"
        );
        assert!(
            release.ends_with("AND holder = CONNECTION_ID()"),
            "{release}"
        );
    }

    #[test]
    fn renewals_and_releases_name_the_version() {
        let r = Record {
            key: "'ledger'".into(),
            owner: "abc-1".into(),
            version: 7,
        };
        let renew = renew_sql(&r, Duration::from_secs(30));
        assert!(renew.contains("INTERVAL 30000000 MICROSECOND"), "{renew}");
        assert!(
            renew.contains("version = 7 AND expire_time >= NOW(6)"),
            "{renew}"
        );
        let release = expire_sql(&[r.clone(), r]);
        assert_eq!(release.matches("UPDATE").count(), 2, "{release}");
    }
}
