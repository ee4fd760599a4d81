//! PostgreSQL's answers as zklock's errors: which end a session, which the retry policy may
//! try again, which say a pooler stands between zklock and the server.

use tokio_postgres::error::SqlState;

use super::tls::refusal;
use crate::core::error::Error;

/// The message for a statement run on a server session that is not the session's own, or is
/// shared with another zklock session.
pub(crate) fn not_own_session() -> String {
    "a lock's statement ran on a server session shared with another zklock session, or not \
     its own: a pooler in transaction mode (PgBouncer's pool_mode = transaction) is between \
     zklock and the server, and session locks cannot work through it"
        .to_owned()
}

/// A tokio-postgres error as zklock's: refused credentials are [`Error::AuthFailed`]; a broken
/// or ended session [`Error::ConnectionLoss`] (retried by the policy) — or, `connecting`,
/// [`Error::Io`] with the operating system's reason; the server's other answers
/// [`Error::Postgres`] with their SQLSTATE.
pub(crate) fn error(e: &tokio_postgres::Error, connecting: bool) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let text = format!("{} ({}): {}", db.severity(), code.code(), db.message());
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return Error::AuthFailed(text);
        }
        // Class 57P (the server ends or refuses sessions: shutdown, pg_terminate_backend,
        // crash, starting up, idle timeouts) and, on an open session, class 08 (connection
        // exception). A class 08 refusal at connect keeps its words: it is how a pooler says it
        // will not pass the session's limits on ("unsupported startup parameter: options").
        if code.code().starts_with("57P") || (code.code().starts_with("08") && !connecting) {
            tracing::debug!("zklock: PostgreSQL session ended: {text}");
            return Error::ConnectionLoss;
        }
        // A statement prepared on this session unknown to the server session that runs it, or
        // one of another session's name there: its statements reach more than one server
        // session (a pooler in transaction mode).
        if *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::DUPLICATE_PSTATEMENT
        {
            return Error::Postgres(format!("{}: {text}", not_own_session()));
        }
        return Error::Postgres(text);
    }
    if let Some(why) = refusal(e) {
        return Error::Tls(why);
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if connecting {
                return Error::io("connecting to PostgreSQL", io);
            }
            return Error::ConnectionLoss;
        }
        source = s.source();
    }
    if e.is_closed() {
        return Error::ConnectionLoss;
    }
    if connecting {
        // The cause, if any, says what: "invalid configuration: …".
        let message = match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        };
        return Error::Io {
            context: "connecting to PostgreSQL".into(),
            kind: std::io::ErrorKind::Other,
            message,
        };
    }
    Error::Postgres(e.to_string())
}

/// The SQLSTATE of the server's answer in `e` (an [`Error::Postgres`] made by [`error`]).
pub(crate) fn sqlstate(e: &Error) -> Option<&str> {
    let Error::Postgres(text) = e else {
        return None;
    };
    let (_, rest) = text.split_once(" (")?;
    let (code, _) = rest.split_once("): ")?;
    (code.len() == 5).then_some(code)
}

/// Whether the retry policy may try again after `e`: a session lost, or one that could not be
/// opened for a reason of the network.
pub(crate) fn retryable(e: &Error) -> bool {
    matches!(e, Error::ConnectionLoss | Error::Io { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlstate_is_read_back_from_the_message() {
        let e = Error::Postgres("ERROR (42P01): relation \"t (x)\" does not exist".into());
        assert_eq!(sqlstate(&e), Some("42P01"));
        assert_eq!(sqlstate(&Error::Postgres(not_own_session())), None);
        assert_eq!(sqlstate(&Error::ConnectionLoss), None);
    }
}
