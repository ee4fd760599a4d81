//! What a guarded write on Redis carries and answers: [`RedisOp`]s (a `SET` or a `DEL` of the
//! caller's keys) and their [`RedisOpResult`]s, a user's Lua script ([`RedisScript`]) and the
//! value it returns ([`RedisValue`]).

/// One write of a guarded transaction (`guarded_multi` on a held Redis lock): a `SET` or a
/// `DEL` of one of the caller's keys. On a Redis Cluster the key must hash to the lock's slot:
/// put the lock's name in braces in it (`{ledger}:balance` for the lock `ledger`), or the call
/// is refused before any I/O.
///
/// # Example
/// ```
/// use zklock::redis::RedisOp;
///
/// let ops = [RedisOp::set("{ledger}:balance", "100"), RedisOp::delete("{ledger}:pending")];
/// assert_eq!(ops[0].key(), "{ledger}:balance");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOp(pub(crate) Kind);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Set { key: String, value: Vec<u8> },
    Delete { key: String },
}

impl RedisOp {
    /// `SET key value`: the key holds `value` (any bytes), whatever it held, with no TTL.
    pub fn set(key: &str, value: impl AsRef<[u8]>) -> RedisOp {
        RedisOp(Kind::Set {
            key: key.to_owned(),
            value: value.as_ref().to_vec(),
        })
    }

    /// `DEL key`.
    pub fn delete(key: &str) -> RedisOp {
        RedisOp(Kind::Delete {
            key: key.to_owned(),
        })
    }

    /// The key the operation writes.
    pub fn key(&self) -> &str {
        match &self.0 {
            Kind::Set { key, .. } | Kind::Delete { key } => key,
        }
    }
}

/// The answer to one [`RedisOp`] of a guarded transaction, in the same position.
///
/// # Example
/// ```no_run
/// use zklock::redis::{RedisMutex, RedisOp, RedisOpResult};
///
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let mutex = RedisMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// let results = guard.guarded_multi(&[RedisOp::delete("{ledger}:pending")])?;
/// if results[0] == (RedisOpResult::Delete { existed: false }) {
///     println!("nothing was pending");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisOpResult {
    /// The key was set.
    Set,
    /// The key was deleted.
    Delete {
        /// Whether it existed.
        existed: bool,
    },
}

/// A Lua script of the caller's, run by `guarded_script` on a held Redis lock after the hold
/// is checked, in the same server-side step. In the script `KEYS` and `ARGV` are the keys and
/// arguments given here, numbered from 1 as in any Redis script, and `redis.call` works as
/// usual; what it returns comes back as a [`RedisValue`].
///
/// On a Redis Cluster every key must hash to the lock's slot (the lock's name in braces:
/// `{ledger}:balance`), or the call is refused before any I/O. As in any Redis script, the
/// script must name every key it touches in `KEYS`.
///
/// # Example
/// ```
/// use zklock::redis::RedisScript;
///
/// let add = RedisScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
///     .key("{ledger}:balance")
///     .arg("25");
/// assert_eq!(add.keys(), ["{ledger}:balance"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisScript {
    pub(crate) body: String,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
}

impl RedisScript {
    /// The script `body` (Lua, as `EVAL` takes it), with no keys and no arguments yet.
    pub fn new(body: &str) -> RedisScript {
        RedisScript {
            body: body.to_owned(),
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds `key` as the next of the script's `KEYS`.
    #[must_use]
    pub fn key(mut self, key: &str) -> RedisScript {
        self.keys.push(key.to_owned());
        self
    }

    /// Adds `arg` (any bytes) as the next of the script's `ARGV`.
    #[must_use]
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> RedisScript {
        self.args.push(arg.as_ref().to_vec());
        self
    }

    /// The script's keys, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
}

/// What a [`RedisScript`] returned, as Redis converts a Lua value: a number is an
/// [`Int`](Self::Int) (truncated), a string [`Data`](Self::Data), `{ok = …}` a
/// [`Status`](Self::Status), a table an [`Array`](Self::Array) (up to its first `nil`), `nil`
/// and `false` [`Nil`](Self::Nil), `true` `Int(1)`.
///
/// # Example
/// ```no_run
/// use zklock::redis::{RedisMutex, RedisScript, RedisValue};
///
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let mutex = RedisMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// let add = RedisScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
///     .key("{ledger}:balance")
///     .arg("25");
/// if let RedisValue::Int(balance) = guard.guarded_script(&add)? {
///     println!("balance now {balance}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisValue {
    /// `nil` (or `false`).
    Nil,
    /// A number.
    Int(i64),
    /// A string, as bytes.
    Data(Vec<u8>),
    /// A status (`{ok = "…"}`, or the `OK` of a command returned as it is).
    Status(String),
    /// A table.
    Array(Vec<RedisValue>),
}

impl RedisValue {
    /// The value of a reply: RESP3's types that a Lua script can give (after
    /// `redis.setresp(3)`) as their nearest RESP2 value.
    pub(crate) fn of(v: redis::Value) -> RedisValue {
        use redis::Value as V;
        match v {
            V::Nil => RedisValue::Nil,
            V::Int(i) => RedisValue::Int(i),
            V::Boolean(b) => RedisValue::Int(i64::from(b)),
            V::BulkString(b) => RedisValue::Data(b),
            V::SimpleString(s) => RedisValue::Status(s),
            V::Okay => RedisValue::Status("OK".into()),
            V::Double(d) => RedisValue::Data(d.to_string().into_bytes()),
            V::VerbatimString { text, .. } => RedisValue::Data(text.into_bytes()),
            V::Array(items) | V::Set(items) | V::Push { data: items, .. } => {
                RedisValue::Array(items.into_iter().map(RedisValue::of).collect())
            }
            V::Map(pairs) => RedisValue::Array(
                pairs
                    .into_iter()
                    .flat_map(|(k, v)| [RedisValue::of(k), RedisValue::of(v)])
                    .collect(),
            ),
            V::Attribute { data, .. } => RedisValue::of(*data),
            other => RedisValue::Data(format!("{other:?}").into_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_lua_values() {
        use redis::Value as V;
        let reply = V::Array(vec![
            V::Int(3),
            V::BulkString(b"x".to_vec()),
            V::Okay,
            V::Nil,
            V::Boolean(true),
            V::Map(vec![(V::SimpleString("k".into()), V::Int(1))]),
        ]);
        assert_eq!(
            RedisValue::of(reply),
            RedisValue::Array(vec![
                RedisValue::Int(3),
                RedisValue::Data(b"x".to_vec()),
                RedisValue::Status("OK".into()),
                RedisValue::Nil,
                RedisValue::Int(1),
                RedisValue::Array(vec![RedisValue::Status("k".into()), RedisValue::Int(1)]),
            ])
        );
    }

    #[test]
    fn ops_and_scripts_name_their_keys() {
        assert_eq!(RedisOp::set("{a}:x", b"1").key(), "{a}:x");
        assert_eq!(RedisOp::delete("{a}:y").key(), "{a}:y");
        let s = RedisScript::new("return 1")
            .key("k1")
            .key("k2")
            .arg("a")
            .arg([0u8, 1]);
        assert_eq!(s.keys(), ["k1", "k2"]);
        assert_eq!(s.args, vec![b"a".to_vec(), vec![0, 1]]);
    }
}
