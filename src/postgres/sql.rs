//! The SQL of the PostgreSQL locks, in one place: what a session runs when it opens, when it
//! beats, when it waits for, tries and lets go of a lock. Nothing here depends on the rest of
//! the crate, so the benchmark runs these very statements on bare connections.

/// Every session adds a marker of its own, a random positive `int4`, to the custom setting
/// `zklock.marker` of the server session it opens on (a comma before each marker: `,MARKER`).
/// A server session that one zklock session alone has opened on holds exactly that one marker;
/// one that a pooler in transaction mode hands to several holds several, and one that another
/// server session's statements reach through it holds another's (or none).
///
/// SQL true when the server session running the statement holds the marker given as the
/// parameter `$p` (an `int8`) and no other: it is this session's own, shared with no other
/// zklock session. Reading a setting costs next to nothing, where reading `pg_locks` would copy
/// the server's whole lock table under every lock-manager partition lock.
macro_rules! own {
    ($p:literal) => {
        concat!(
            "coalesce(current_setting('zklock.marker', true) = ',' || (",
            $p,
            "::int8)::text, false)"
        )
    };
}

/// A session's first statement: its backend, the server's version, whether its marker (`$1`,
/// an `int4`) was new to the server session, and the marker added (see [`own!`]).
pub(crate) const OPEN: &str = "SELECT pg_backend_pid(), \
     current_setting('server_version_num')::int, \
     strpos(old || ',', ',' || $1::text || ',') = 0, \
     set_config('zklock.marker', old || ',' || $1::text, false) \
     FROM (SELECT coalesce(current_setting('zklock.marker', true), '') AS old) AS markers";

/// A heartbeat: the backend, and whether the session is its own (`$1`, the marker as `int8`).
pub(crate) const BEAT: &str = concat!("SELECT pg_backend_pid(), ", own!("$1"));

/// The fencing token, read on a holding session (columns as the lock statement's): the
/// backend, a transaction id assigned now (above every one assigned before, so above the token
/// of every earlier holder, who read theirs while holding), and whether the session is its own
/// (`$1`, the marker as `int8`).
/// The transactional logical message (a few bytes of WAL, prefix `zklock`) makes the
/// transaction one that wrote WAL, whose commit is flushed before the answer
/// (`synchronous_commit = on`): a transaction id that has only been assigned would be committed
/// asynchronously and could be handed out again after a crash. That flush is what a token
/// costs, so a mutex reads it only when asked for; the semaphore and the latch, whose tokens
/// come with the grant, read it in their lock statement.
/// The columns are named as the lock statements' (`pid`, `xid`, `own`, `m`), for the variant
/// that records the token (`tokens.rs`); it is sent with that variant's parameters (`$2` to
/// `$4`), which it does not use.
pub(crate) const TOKEN: &str = concat!(
    "SELECT pg_backend_pid() AS pid, txid_current() AS xid, ",
    own!("$1"),
    " AS own, pg_logical_emit_message(true, 'zklock', '') AS m"
);

/// A guarded transaction's check, its first statement after `BEGIN`: the backend, whether the
/// session is its own (`$1`, the marker as `int8`), and whether it holds the advisory lock
/// `hashtextextended($2, $3)` in mode `$4` (`ExclusiveLock` or `ShareLock`; a 64-bit key shows
/// in `pg_locks` as its high and low 32 bits, `objsubid` 1). It also bounds each later
/// statement of the transaction to `$5` (ms, as text) on the server (`statement_timeout`, and
/// `lock_timeout` for a row lock it waits for); both settings end with the transaction.
pub(crate) const GUARD: &str = concat!(
    "SELECT pg_backend_pid(), ",
    own!("$1"),
    ", EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
     AND pid = pg_backend_pid() AND mode = $4 AND objsubid = 1 \
     AND classid = ((k >> 32) & 4294967295)::oid AND objid = (k & 4294967295)::oid), \
     set_config('statement_timeout', $5, true), set_config('lock_timeout', $5, true) \
     FROM (SELECT hashtextextended($2, $3) AS k) AS hashed"
);

/// The statements of one lock mode: exclusive (`pg_advisory_lock`) or shared
/// (`pg_advisory_lock_shared`), on the key `hashtextextended($1, $3)` (the name and the seed);
/// with the fencing token read in the lock statement, or later (the column `xid` null).
pub(crate) struct Statements {
    /// Sets `lock_timeout` to `$4` (ms, as text; `0`: no limit) and waits for the lock, then
    /// reads the session's backend, the fencing token (or null) and whether the session is its
    /// own (shared with no other zklock session through a pooler: if it is not, the lock just
    /// taken is let go of in the same statement). The setting is made in the lock function's
    /// argument, which is computed before the function waits, so the wait needs no statement
    /// of its own for its limit. The function in `FROM` returns (the lock is granted) before
    /// the target list is computed, so the transaction id is assigned after the grant, and the
    /// unlock sees its row.
    pub(crate) lock: &'static str,
    /// One attempt without waiting: the same columns, and whether it was granted (`l`, last).
    pub(crate) try_lock: &'static str,
    /// `$1` the name, `$2` the seed.
    pub(crate) unlock: &'static str,
    /// The SQL function that takes the lock, for `PgMutex::lock_sql`.
    pub(crate) function: &'static str,
    /// Whether the lock is shared (a read half).
    pub(crate) shared: bool,
    /// Whether the token is read in the lock statement.
    pub(crate) token: bool,
}

macro_rules! statements {
    ($suffix:literal, $shared:literal, $with_token:literal, $token:literal, $no_token:literal) => {
        Statements {
            lock: concat!(
                "SELECT pid, xid, own, CASE WHEN NOT own THEN pg_advisory_unlock",
                $suffix,
                "(hashtextextended($1, $3)) END, m ",
                "FROM (SELECT pg_backend_pid() AS pid, ",
                own!("$2"),
                " AS own, ",
                $token,
                " FROM pg_advisory_lock",
                $suffix,
                "(CASE WHEN set_config('lock_timeout', $4, false) IS NOT NULL ",
                "THEN hashtextextended($1, $3) END)) AS grant_",
            ),
            try_lock: concat!(
                "SELECT pid, xid, own, CASE WHEN l AND NOT own THEN pg_advisory_unlock",
                $suffix,
                "(hashtextextended($1, $3)) END, m, l ",
                "FROM (SELECT pg_backend_pid() AS pid, l, ",
                own!("$2"),
                " AS own, ",
                $no_token,
                " FROM pg_try_advisory_lock",
                $suffix,
                "(hashtextextended($1, $3)) AS l) AS attempt",
            ),
            unlock: concat!(
                "SELECT pg_advisory_unlock",
                $suffix,
                "(hashtextextended($1, $2))"
            ),
            function: concat!("pg_advisory_lock", $suffix),
            shared: $shared,
            token: $with_token,
        }
    };
}

/// A mutex's and a read-write lock's write half: the token read when asked for.
pub(crate) const EXCLUSIVE: Statements = statements!(
    "",
    false,
    false,
    "NULL::int8 AS xid, NULL::pg_lsn AS m",
    "NULL::int8 AS xid, NULL::pg_lsn AS m"
);
/// A read-write lock's read half.
pub(crate) const SHARED: Statements = statements!(
    "_shared",
    true,
    false,
    "NULL::int8 AS xid, NULL::pg_lsn AS m",
    "NULL::int8 AS xid, NULL::pg_lsn AS m"
);
/// The leader latch's: the token (its epoch) with the grant.
pub(crate) const EXCLUSIVE_WITH_TOKEN: Statements = statements!(
    "",
    false,
    true,
    "txid_current() AS xid, pg_logical_emit_message(true, 'zklock', '') AS m",
    "CASE WHEN l THEN txid_current() END AS xid, \
     CASE WHEN l THEN pg_logical_emit_message(true, 'zklock', '') END AS m"
);

/// Takes the first free lease key, `hashtextextended($1, i)` for `i` from 1 to `$3`, without
/// waiting (`LIMIT 1` stops at the first lock taken), then reads what a grant's statement reads
/// (the columns of [`Statements::lock`]) and the key's seed `i` (column 5). `OFFSET 0` keeps each subquery from being flattened, so the
/// pick runs once.
pub(crate) const TRY_ANY: &str = concat!(
    "SELECT pid, xid, own, ",
    "CASE WHEN k IS NOT NULL AND NOT own THEN pg_advisory_unlock(hashtextextended($1, k)) END, ",
    "m, k FROM (SELECT pg_backend_pid() AS pid, k, ",
    "CASE WHEN k IS NOT NULL THEN txid_current() END AS xid, ",
    own!("$2"),
    " AS own, CASE WHEN k IS NOT NULL THEN pg_logical_emit_message(true, 'zklock', '') END AS m ",
    "FROM (SELECT (SELECT i FROM generate_series(1, $3) AS i ",
    "WHERE pg_try_advisory_lock(hashtextextended($1, i)) LIMIT 1) AS k OFFSET 0) AS pick ",
    "OFFSET 0) AS attempt",
);

/// `text` as an SQL string literal that reads as `text` under every setting: `'…'` with each
/// `'` doubled; or, when it holds a backslash, `E'…'` with each `\` doubled too (in a plain
/// literal a backslash is an escape when `standard_conforming_strings` is off and text when it
/// is on; in an `E''` literal it is an escape under both).
pub(crate) fn literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', r"\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// The oldest PostgreSQL with `hashtextextended` (the lock key's function): 11.
pub(crate) const MIN_VERSION: u32 = 110_000;

/// A server too old for these statements is refused, saying why.
pub(crate) fn check_version(version: u32) -> Result<(), String> {
    if version < MIN_VERSION {
        return Err(format!(
            "PostgreSQL {} is too old: zklock needs PostgreSQL 11 or later \
             (for hashtextextended, the lock key's function)",
            shown_version(version)
        ));
    }
    Ok(())
}

/// 150004 as `15.4`, 110022 as `11.22`, 90624 as `9.6.24`.
fn shown_version(v: u32) -> String {
    if v >= 100_000 {
        format!("{}.{}", v / 10_000, v % 10_000)
    } else {
        format!("{}.{}.{}", v / 10_000, v / 100 % 100, v % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_quotes_and_escape_backslashes_in_the_e_form() {
        assert_eq!(literal("ledger"), "'ledger'");
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\b 'c'"), r"E'a\\b ''c'''");
    }

    /// `docs/postgres.md`'s table of statements shows how a session marks its server session.
    #[test]
    fn the_docs_show_the_marker_a_session_opens_with() {
        let docs = include_str!("../../docs/postgres.md");
        let row = docs
            .lines()
            .find(|l| l.starts_with("| open a session |"))
            .expect("the docs' row for opening a session");
        assert!(OPEN.contains("set_config('zklock.marker'"));
        assert!(row.contains("set_config('zklock.marker'"), "{row}");
        assert!(!row.contains("pg_try_advisory_lock"), "{row}");
    }

    #[test]
    fn versions_are_shown_and_checked() {
        assert_eq!(shown_version(150_004), "15.4");
        assert_eq!(shown_version(90_624), "9.6.24");
        assert!(check_version(110_000).is_ok());
        let old = check_version(100_023).unwrap_err();
        assert!(
            old.contains("10.23 is too old") && old.contains("11"),
            "{old}"
        );
    }
}
