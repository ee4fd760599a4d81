//! Writes guarded by a hold: the caller's writes ([`RedisOp`]s, or a [`RedisScript`] of its
//! own) run in one Lua script that first checks that the lock's key still names the hold — the
//! check the release and renewal scripts make — and applies them only then. A script runs
//! whole with no other command between its steps, so the writes land only while the hold is
//! the caller's on the server that applies them, whatever the caller's process believed when
//! it sent them (a holder that stood still past its TTL sends them believing it holds).
//!
//! | hold | key checked | check |
//! |---|---|---|
//! | mutex (either layout) | `zklock:{N}` (or `N`) | its value is the hold's owner id |
//! | write lock | `zklock:rw:{N}:writer` | its value is the hold's owner id |
//! | read lock | `zklock:rw:{N}` | the hold's entry is there and has not expired by `TIME` |
//! | semaphore lease | `zklock:sem:{N}` | the lease's entry is there and has not expired by `TIME` |

use super::client::{Calling, RedisClient};
use super::error::broken;
use super::ops::{Kind, RedisOp, RedisOpResult, RedisScript, RedisValue};
use super::scripts::Keys;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;

/// ARGV: `h` (the key holds the owner id) or `l` (the key is a sorted set of entries by
/// expiry, server ms), the owner id. Returns `{0, why}` from the script unless `KEYS[1]` still
/// names the hold; what follows it runs only while it does.
const CHECK: &str = r"
local function lost()
  if ARGV[1] == 'h' then
    local holder = redis.call('GET', KEYS[1])
    if holder == ARGV[2] then return nil end
    if holder then return 'names another holder' end
    return 'is gone (expired, or deleted)'
  end
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if not expiry then return 'has no entry for this hold' end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(expiry) <= now then return 'has the entry of this hold expired' end
  return nil
end
local why = lost()
if why then return {0, why} end
";

/// The caller's `SET`s and `DEL`s: `KEYS[2..]` one per operation, `ARGV[3..]` `s VALUE` or
/// `d` per operation. Returns `{1, {answer per operation}}`. Neither can fail once the first
/// has been applied (a server over `maxmemory` refuses only a script's first write), so they
/// are applied all or none.
const MULTI: &str = r"
local out = {}
local k = 2
local i = 3
while i <= #ARGV do
  if ARGV[i] == 's' then
    redis.call('SET', KEYS[k], ARGV[i + 1])
    out[#out + 1] = 1
    i = i + 2
  else
    out[#out + 1] = redis.call('DEL', KEYS[k])
    i = i + 1
  end
  k = k + 1
end
return {1, out}
";

/// The caller's script, between [`SCRIPT_HEAD`] and [`SCRIPT_TAIL`], as a function of its own
/// keys (`KEYS[2..]`) and arguments (`ARGV[3..]`). Returns `{1}` for `nil`, `{1, value}`, or
/// `{2, message}` for an error it raised or returned.
const SCRIPT_HEAD: &str = r"
local keys, args = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 3, #ARGV do args[i - 2] = ARGV[i] end
local ok, result = pcall(function(KEYS, ARGV)
";

const SCRIPT_TAIL: &str = r"
end, keys, args)
if type(result) == 'table' and result.err then return {2, result.err} end
if not ok then return {2, tostring(result)} end
if result == nil or result == false then return {1} end
return {1, result}
";

/// How the key checked names a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The key's value is the owner id (a mutex, a write lock).
    Holder,
    /// The key is a sorted set with an entry per hold, by expiry (a read lock, a lease).
    Entry,
}

/// The lock a guarded write is checked against.
pub(crate) struct Guarded<'a> {
    pub(crate) client: &'a RedisClient,
    /// The lock's name, as [`Error::HoldLost`] names it.
    pub(crate) name: &'a str,
    /// The lock's keys (their slot is where the call goes).
    pub(crate) keys: &'a Keys,
    /// The key whose value names the hold.
    pub(crate) key: &'a str,
    pub(crate) check: Check,
}

/// The calling thread's hold, if it has one: its owner id and its health now.
pub(crate) type Holding = Option<(String, LockHealth)>;

/// `ops` behind a check of `holding` on `lock`.
pub(crate) fn multi(
    lock: &Guarded<'_>,
    holding: Holding,
    ops: &[RedisOp],
) -> Result<Vec<RedisOpResult>> {
    let keys: Vec<&str> = ops.iter().map(RedisOp::key).collect();
    let owner = refuse_before_io(lock, holding, &keys)?;
    /// The check and the operations, hashed once.
    static SCRIPT: std::sync::LazyLock<redis::Script> =
        std::sync::LazyLock::new(|| redis::Script::new(&format!("{CHECK}{MULTI}")));
    let mut call = SCRIPT.prepare_invoke();
    call.key(lock.key);
    for key in &keys {
        call.key(*key);
    }
    call.arg(lock.check.arg()).arg(&owner);
    for op in ops {
        match &op.0 {
            Kind::Set { value, .. } => call.arg("s").arg(value.as_slice()),
            Kind::Delete { .. } => call.arg("d"),
        };
    }
    let answer = run(lock, &call)?;
    let results = match answer {
        redis::Value::Array(results) if results.len() == ops.len() => results,
        other => return Err(unexpected(&other)),
    };
    ops.iter()
        .zip(results)
        .map(|(op, result)| match (&op.0, result) {
            (Kind::Set { .. }, _) => Ok(RedisOpResult::Set),
            (Kind::Delete { .. }, redis::Value::Int(n)) => {
                Ok(RedisOpResult::Delete { existed: n > 0 })
            }
            (_, other) => Err(unexpected(&other)),
        })
        .collect()
}

/// `script` behind a check of `holding` on `lock`.
pub(crate) fn script(
    lock: &Guarded<'_>,
    holding: Holding,
    script: &RedisScript,
) -> Result<RedisValue> {
    let keys: Vec<&str> = script.keys.iter().map(String::as_str).collect();
    let owner = refuse_before_io(lock, holding, &keys)?;
    let text = format!("{CHECK}{SCRIPT_HEAD}{}{SCRIPT_TAIL}", script.body);
    let text = redis::Script::new(&text);
    let mut call = text.prepare_invoke();
    call.key(lock.key);
    for key in &keys {
        call.key(*key);
    }
    call.arg(lock.check.arg()).arg(&owner);
    for arg in &script.args {
        call.arg(arg.as_slice());
    }
    Ok(RedisValue::of(run(lock, &call)?))
}

impl Check {
    fn arg(self) -> &'static str {
        match self {
            Check::Holder => "h",
            Check::Entry => "l",
        }
    }
}

/// The owner id of the hold, once the call is found sendable: [`Error::InvalidArgument`] for a
/// key outside the lock's Cluster slot, [`Error::NotOwner`] without a hold,
/// [`Error::HoldLost`] for a hold that reads `Lost` — each before any I/O.
fn refuse_before_io(lock: &Guarded<'_>, holding: Holding, keys: &[&str]) -> Result<String> {
    let inner = lock.client.inner();
    inner.check_slot_of(lock.key, keys)?;
    let (owner, health) = holding.ok_or(Error::NotOwner)?;
    if health == LockHealth::Lost {
        return Err(Error::hold_lost(lock.name, Error::LockLost));
    }
    Ok(owner)
}

/// Sends `call` (once: a call whose connection broke after it was handed over is not sent
/// again, its outcome unknown), waits for the replicas the Client asks for, and reads the
/// check's verdict: the answer after it, or [`Error::HoldLost`].
fn run(lock: &Guarded<'_>, call: &redis::ScriptInvocation<'_>) -> Result<redis::Value> {
    let inner = lock.client.inner();
    let by = Deadline::after(inner.operation_timeout());
    let mut sent = false;
    let answer = inner.call_by(lock.keys, by, Calling::Open, |c| {
        if sent {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the connection broke after the guarded write was sent",
            )));
        }
        let answer: redis::RedisResult<redis::Value> = call.invoke(c);
        // An error answer (a redirect, a replica's READONLY, the script's own error) is the
        // server's: only a connection that broke leaves the outcome unknown.
        sent = !matches!(&answer, Err(e) if e.code().is_some() || !broken(e));
        let answer = answer?;
        let confirmed = inner.replicas().map(|r| (r, r.wait().query::<i64>(c)));
        Ok((answer, confirmed))
    });
    let (answer, confirmed) = match answer {
        Ok((answer, _)) => answer,
        // The script may have run: the caller reads its keys to find out.
        Err(_) if sent => return Err(Error::ConnectionLoss),
        Err(e) => return Err(e),
    };
    let applied = verdict(lock, answer)?;
    match confirmed {
        Some((r, Ok(acked))) if acked < i64::from(r.count) => Err(Error::Redis(format!(
            "the guarded write was applied on the primary, but {acked} of the {} replicas \
             asked for confirmed it within {:?}: a failover may lose it",
            r.count, r.timeout
        ))),
        Some((_, Err(e))) => Err(Error::Redis(format!(
            "the guarded write was applied on the primary, but waiting for its replicas \
             failed: {e}"
        ))),
        _ => Ok(applied),
    }
}

/// The script's answer: `{1, …}` applied, `{0, why}` the hold is gone, `{2, message}` the
/// caller's script failed.
fn verdict(lock: &Guarded<'_>, answer: redis::Value) -> Result<redis::Value> {
    use redis::Value as V;
    let V::Array(mut parts) = answer else {
        return Err(unexpected(&answer));
    };
    let code = match parts.first() {
        Some(V::Int(code)) => *code,
        _ => return Err(unexpected(&V::Array(parts))),
    };
    let second = (parts.len() > 1).then(|| parts.swap_remove(1));
    match (code, second) {
        (1, None) => Ok(V::Nil),
        (1, Some(answer)) => Ok(answer),
        (0, Some(V::BulkString(why))) => Err(Error::hold_lost(
            lock.name,
            Error::Redis(format!(
                "the lock's key {:?} {}",
                lock.key,
                String::from_utf8_lossy(&why)
            )),
        )),
        (2, Some(V::BulkString(message))) => Err(Error::Redis(format!(
            "the guarded script failed (the hold was checked; what the script wrote before \
             failing stays written, as for any Redis script): {}",
            String::from_utf8_lossy(&message)
        ))),
        (code, second) => Err(unexpected(&V::Array(
            std::iter::once(V::Int(code)).chain(second).collect(),
        ))),
    }
}

fn unexpected(answer: &redis::Value) -> Error {
    Error::Redis(format!("unexpected answer to a guarded write: {answer:?}"))
}

/// `guarded_multi` and `guarded_script` of a lock type whose `guarded()` gives the calling
/// thread's hold; `$what` names the lock in their docs.
macro_rules! lock_forms {
    ($lock:ty, $what:literal) => {
        impl $lock {
            #[doc = concat!(
                "Runs `ops` in one server-side step that applies them only while the calling ",
                "thread's hold of ", $what, " lives: one Lua script checks that the lock's key ",
                "still names the hold (as a release does) and then writes. A holder that stood ",
                "still past its TTL (a long pause, a frozen VM) and then writes cannot ",
                "overwrite what the lock's next holder wrote: the write is refused. The ",
                "operations are applied all or none, in order, with no other command between ",
                "them. On a Redis Cluster every key must hash to the lock's slot (the lock's ",
                "name in braces: `{NAME}:balance`).\n\n",
                "# Blocking and errors\n",
                "One script call, bounded by the operation timeout (retried while it has not ",
                "been sent; a connection that breaks after it was sent is ",
                "[`Error::ConnectionLoss`](crate::Error::ConnectionLoss), its outcome unknown). ",
                "Before any I/O: [`Error::InvalidArgument`](crate::Error::InvalidArgument) on a ",
                "Redis Cluster for a key outside the lock's hash slot, ",
                "[`Error::NotOwner`](crate::Error::NotOwner) if the calling thread does not ",
                "hold the lock, [`Error::HoldLost`](crate::Error::HoldLost) if its hold reads ",
                "`Lost`. [`Error::HoldLost`](crate::Error::HoldLost) if the server finds the ",
                "hold gone (its key expired, deleted or another's), with nothing applied. With ",
                "replicated grants (`wait_for_replicas`) the write is confirmed as a grant is, ",
                "else [`Error::Redis`](crate::Error::Redis) says it was applied on the primary ",
                "only.\n\n",
                "# Example\n",
                "```no_run\n",
                "use zklock::redis::RedisOp;\n",
                "# fn main() -> zklock::Result<()> {\n",
                "# let client = zklock::RedisClient::connect(\"redis://127.0.0.1:6379\")?;\n",
                "let mutex = zklock::redis::RedisMutex::new(&client, \"ledger\")?;\n",
                "let guard = mutex.lock()?;\n",
                "match guard.guarded_multi(&[RedisOp::set(\"{ledger}:balance\", \"100\")]) {\n",
                "    Ok(_) => {}\n",
                "    Err(zklock::Error::HoldLost { .. }) => println!(\"lost the lock: nothing written\"),\n",
                "    Err(e) => return Err(e),\n",
                "}\n",
                "# Ok(()) }\n",
                "```"
            )]
            pub fn guarded_multi(
                &self,
                ops: &[$crate::redis::RedisOp],
            ) -> $crate::Result<Vec<$crate::redis::RedisOpResult>> {
                let (lock, holding) = self.guarded();
                $crate::redis::guarded::multi(&lock, holding, ops)
            }

            #[doc = concat!(
                "Runs `script` in the same server-side step as a check that the calling ",
                "thread's hold of ", $what, " lives (see `guarded_multi`): the script runs ",
                "only while it does, with no other command between the check and the script.",
                "\n\n# Blocking and errors\n",
                "As `guarded_multi`. An error the script raises (or returns with ",
                "`redis.error_reply`) is [`Error::Redis`](crate::Error::Redis) with its ",
                "message; Redis does not roll a script back, so what it wrote before failing ",
                "stays written. A script that does not compile is ",
                "[`Error::Redis`](crate::Error::Redis), with nothing run."
            )]
            pub fn guarded_script(
                &self,
                script: &$crate::redis::RedisScript,
            ) -> $crate::Result<$crate::redis::RedisValue> {
                let (lock, holding) = self.guarded();
                $crate::redis::guarded::script(&lock, holding, script)
            }
        }
    };
}

/// `guarded_multi` and `guarded_script` on the guards ([`LockGuard`](crate::LockGuard),
/// [`ArcLockGuard`](crate::ArcLockGuard)) of a lock type of [`lock_forms!`].
macro_rules! guard_forms {
    ($lock:ident) => {
        $crate::core::guarded::guard_forms!(
            fn guarded_multi(
                &self,
                ops: &[$crate::redis::RedisOp]
            ) -> $crate::Result<Vec<$crate::redis::RedisOpResult>>;
            "`ops` applied in one server-side step only while the hold lives.";
            example {};
            $lock
        );
        $crate::core::guarded::guard_forms!(
            fn guarded_script(
                &self,
                script: &$crate::redis::RedisScript
            ) -> $crate::Result<$crate::redis::RedisValue>;
            "`script` run in one server-side step only while the hold lives.";
            example {};
            $lock
        );
    };
}

pub(crate) use {guard_forms, lock_forms};
