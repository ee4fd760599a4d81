//! The SQL of the MySQL locks, in one place: the names (how a lock name becomes a `GET_LOCK`
//! name and a lease record's key), the fencing tokens' table and its bump, and the table
//! mode's lease records. Nothing here depends on the rest of the crate.

use std::time::Duration;

use crate::core::error::{Error, Result};

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// The longest `GET_LOCK` name, in characters: longer names are hashed.
const MAX_KEY: usize = 64;

/// The `GET_LOCK` name of `name` as an SQL expression: the quoted name up to 64 characters,
/// `SHA2(…, 256)` of it beyond.
pub(crate) fn key_sql(name: &str) -> String {
    let literal = literal(name);
    if name.chars().count() <= MAX_KEY {
        literal
    } else {
        format!("SHA2({literal}, 256)")
    }
}

/// `s` as an SQL string that reads the same under every `sql_mode`: `'…'` with `'` doubled,
/// or `CONVERT(X'…' USING utf8mb4)` for text with a quote or backslash (whose escaping
/// depends on `NO_BACKSLASH_ESCAPES`).
fn literal(s: &str) -> String {
    if s.contains(['\'', '\\']) || s.chars().any(char::is_control) {
        let hex: String = s.bytes().map(|b| format!("{b:02X}")).collect();
        format!("CONVERT(X'{hex}' USING utf8mb4)")
    } else {
        format!("'{s}'")
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

/// The table of fencing tokens: one counter row per lock key, bumped at each grant.
pub(crate) const TOKENS: &str = "zklock_tokens";

/// The fencing tokens' table, created at connect if missing.
pub(crate) const TOKENS_DDL: &str = "CREATE TABLE IF NOT EXISTS zklock_tokens (\
    name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
    token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB";

/// Bumps the token of the name in `@zklock_key` when `@zklock_got` is 1 or more (granted),
/// leaving it in `LAST_INSERT_ID()`.
pub(crate) const BUMP: &str =
    "INSERT INTO zklock_tokens (name, token) SELECT @zklock_key, LAST_INSERT_ID(1) \
    FROM DUAL WHERE @zklock_got >= 1 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1);";

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
    fn keys_are_the_name_or_its_sha2() {
        assert_eq!(key_sql("ledger"), "'ledger'");
        assert_eq!(key_sql(&"é".repeat(64)), format!("'{}'", "é".repeat(64)));
        assert_eq!(
            key_sql(&"x".repeat(65)),
            format!("SHA2('{}', 256)", "x".repeat(65))
        );
        assert_eq!(key_sql("it's"), "CONVERT(X'69742773' USING utf8mb4)");
        assert_eq!(key_sql("a\\b"), "CONVERT(X'615C62' USING utf8mb4)");
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
