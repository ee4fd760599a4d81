//! Who holds a Redis lock and who waits for it, read in one script (one consistent snapshot).

use std::time::Duration;

use redis::Script;

use super::client::Inner;
use super::scripts::{invocation, Keys, Layout};
use crate::core::deadline::Deadline;
use crate::core::error::Result;

/// One holder or waiter of a Redis lock, semaphore or election, as
/// [`RedisMutex::participants`](super::RedisMutex::participants) reads them.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let mutex = zklock::redis::RedisMutex::new(&client, "ledger")?;
/// for p in mutex.participants()? {
///     let what = if p.holds { "holds" } else { "waits" };
///     println!("{} {what}, {:?} left", p.id, p.expires_in);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisParticipant {
    /// Its id: `CLIENT:SEQ` (a read-write lock's end in `r` or `w`, a latch's are
    /// `CLIENT:latchN`; on redis-py's layout, whatever token the holder wrote).
    pub id: String,
    /// Whether it holds (or has a lease); otherwise it waits in the queue.
    pub holds: bool,
    /// How long until its hold (or its queue entry) expires unless renewed; `None` for a key
    /// without a TTL.
    pub expires_in: Option<Duration>,
    /// The host of the process whose Client it is (from the id; `None` for a holder on
    /// redis-py's layout or of another library).
    pub host: Option<String>,
    /// That process's id.
    pub pid: Option<u32>,
    /// The fencing token of a mutex's or latch's holder (the last one granted; `None` for a
    /// waiter, a semaphore's or read-write lock's holders, and once the token key expired).
    pub token: Option<u64>,
}

/// The host and process of a zklock owner id `RANDOM.PID@HOST[/N]:SEQ`.
fn origin(id: &str) -> (Option<String>, Option<u32>) {
    let client = id.rsplit_once(':').map_or(id, |(client, _)| client);
    let client = client.split('/').next().unwrap_or(client);
    let Some((random_pid, host)) = client.split_once('@') else {
        return (None, None);
    };
    let pid = random_pid
        .split_once('.')
        .and_then(|(_, pid)| pid.parse().ok());
    match pid {
        Some(pid) if !host.is_empty() => (Some(host.to_owned()), Some(pid)),
        _ => (None, None),
    }
}

/// KEYS as the layout's; ARGV: how the holders are kept (`key`, `set`, `rw`). Returns
/// `{holders, waiters}`, each a flat list of id and ms left (-1: no TTL), holders first in
/// the order they hold (a writer before readers), waiters in queue order.
const PEEK: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders, waiters = {}, {}
local function key(k)
  local id = redis.call('GET', k)
  if id then
    table.insert(holders, id)
    table.insert(holders, redis.call('PTTL', k))
  end
end
if ARGV[1] == 'key' then key(KEYS[1]) end
if ARGV[1] == 'rw' then key(KEYS[5]) end
if ARGV[1] ~= 'key' then
  local set = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #set, 2 do
    local left = tonumber(set[i + 1]) - now
    if left > 0 then
      table.insert(holders, set[i])
      table.insert(holders, left)
    end
  end
end
if #KEYS >= 3 then
  for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    local expiry = redis.call('ZSCORE', KEYS[3], id)
    if expiry and tonumber(expiry) > now then
      table.insert(waiters, id)
      table.insert(waiters, tonumber(expiry) - now)
    end
  end
end
local token = -1
if ARGV[1] == 'key' and #KEYS >= 4 then
  token = tonumber(redis.call('GET', KEYS[4]) or '-1')
end
return {holders, waiters, token}
";

/// Reads the holders and waiters of the lock with `keys`, within the operation timeout.
pub(crate) fn read(inner: &Inner, keys: &Keys) -> Result<Vec<RedisParticipant>> {
    let how = match keys.layout {
        Layout::Queue | Layout::RedisPy => "key",
        Layout::Semaphore => "set",
        Layout::ReadWrite => "rw",
    };
    let script = Script::new(PEEK);
    let ((holders, waiters, token), _) =
        inner.call(keys, Deadline::after(Duration::ZERO), |c| {
            let mut call = invocation(&script, keys);
            call.arg(how);
            call.invoke::<(Vec<(String, i64)>, Vec<(String, i64)>, i64)>(c)
        })?;
    let left = |ms: i64| u64::try_from(ms).ok().map(Duration::from_millis);
    let who = |id: String, holds: bool, ms: i64| {
        let (host, pid) = origin(&id);
        RedisParticipant {
            id,
            holds,
            expires_in: left(ms),
            host,
            pid,
            token: None,
        }
    };
    let mut found: Vec<RedisParticipant> = holders
        .into_iter()
        .map(|(id, ms)| who(id, true, ms))
        .chain(waiters.into_iter().map(|(id, ms)| who(id, false, ms)))
        .collect();
    // The token key holds the last grant's: a mutex's single holder's.
    if let (Some(first), Ok(token)) = (found.first_mut(), u64::try_from(token)) {
        if first.holds && how == "key" {
            first.token = Some(token);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn the_origin_of_zklock_ids_and_none_of_others() {
        let host = |id: &str| origin(id);
        assert_eq!(
            host("2385ab4614a780ab.4242@vm-1.example:7"),
            (Some("vm-1.example".to_owned()), Some(4242))
        );
        assert_eq!(
            host("2385ab4614a780ab.4242@vm/3:12r"),
            (Some("vm".to_owned()), Some(4242))
        );
        assert_eq!(host("2385ab4614a780ab/1:1"), (None, None), "an older id");
        assert_eq!(host("b'9f2c…'"), (None, None), "redis-py's token");
        assert_eq!(host("x.y@h:1"), (None, None), "no process id");
    }
}
