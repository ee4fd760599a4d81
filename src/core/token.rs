//! A hold's fencing token: a number handed with the grant, or read from the server the first
//! time it is asked for.

use std::sync::Arc;

use super::error::Result;

/// A hold's fencing token: given with the grant, or read from the server the first time it is
/// asked for (where reading it costs the grant a write: PostgreSQL's transaction id).
#[derive(Clone)]
pub(crate) enum Token {
    Known(u64),
    Later(Arc<LaterToken>),
}

/// A token read when first asked for, then kept.
pub(crate) struct LaterToken {
    value: parking_lot::Mutex<Option<u64>>,
    read: Box<dyn Fn() -> Result<u64> + Send + Sync>,
}

impl Token {
    /// A token that `read` gets from the server (on the hold's own session, within the
    /// backend's bound) the first time it is asked for.
    pub(crate) fn later(read: impl Fn() -> Result<u64> + Send + Sync + 'static) -> Token {
        Token::Later(Arc::new(LaterToken {
            value: parking_lot::Mutex::new(None),
            read: Box::new(read),
        }))
    }

    /// The token, read now if it was not yet; `None` when it cannot be read (the hold is gone
    /// or the server did not answer in time: the reason is logged).
    pub(crate) fn get(&self) -> Option<u64> {
        match self {
            Token::Known(t) => Some(*t),
            Token::Later(later) => {
                let mut value = later.value.lock();
                if value.is_none() {
                    match (later.read)() {
                        Ok(t) => *value = Some(t),
                        Err(e) => tracing::warn!("zklock: reading a hold's fencing token: {e}"),
                    }
                }
                *value
            }
        }
    }

    /// The token if it is known, without asking the server: what health events carry (0 for
    /// a token never asked for).
    pub(crate) fn known(&self) -> u64 {
        match self {
            Token::Known(t) => *t,
            Token::Later(later) => later.value.try_lock().and_then(|v| *v).unwrap_or(0),
        }
    }
}

impl From<u64> for Token {
    fn from(token: u64) -> Token {
        Token::Known(token)
    }
}
