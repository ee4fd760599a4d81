//! The Redis lock's keys and the Lua scripts that change them. Every change of a lock's state
//! is one script, so that it is atomic on the server; every script reads the server's clock
//! (`TIME`), never the client's.
//!
//! A lock named `N` has these keys (one hash tag, so that they share a Cluster slot):
//!
//! | key | type | what |
//! |---|---|---|
//! | `zklock:{N}` | string, TTL | the holder's id; its TTL is the hold's lease |
//! | `zklock:{N}:queue` | list | waiter ids in arrival order |
//! | `zklock:{N}:timeouts` | sorted set | each waiter's entry expiry, server ms |
//! | `zklock:{N}:token` | string, TTL | the last fencing token granted |
//!
//! A waiter's id is `CLIENT:SEQ`; its wake-up is published on `zklock:wake:CLIENT`, the one
//! channel its Client subscribes to.
//!
//! The redis-py layout is redis-py's `Lock`: the key is the name itself, its value the holder's
//! id, `SET NX PX` to take it, compare-and-delete to release, compare-and-`PEXPIRE` to extend.
//! There is no queue and no token key: its waiters poll, as redis-py's do.

use redis::Script;

/// How a lock's state is laid out on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// zklock's: holder, queue, entry timeouts, last token.
    Queue,
    /// redis-py's `Lock`: the holder key alone, named as the lock.
    RedisPy,
}

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) layout: Layout,
    pub(crate) holder: String,
    queue: String,
    timeouts: String,
    token: String,
}

impl Keys {
    pub(crate) fn new(name: &str, layout: Layout) -> Keys {
        let holder = match layout {
            Layout::Queue => format!("zklock:{{{name}}}"),
            Layout::RedisPy => name.to_owned(),
        };
        Keys {
            layout,
            queue: format!("{holder}:queue"),
            timeouts: format!("{holder}:timeouts"),
            token: format!("{holder}:token"),
            holder,
        }
    }

    /// The keys the layout's scripts take, in order.
    pub(crate) fn all(&self) -> Vec<&str> {
        match self.layout {
            Layout::Queue => vec![&self.holder, &self.queue, &self.timeouts, &self.token],
            Layout::RedisPy => vec![&self.holder],
        }
    }
}

/// The channel a Client's waiters are woken on.
pub(crate) fn wake_channel(client: &str) -> String {
    format!("zklock:wake:{client}")
}

/// Drops expired waiters from the head of the queue and returns the first live one (or nil).
/// `now` is the server's time in ms.
pub(crate) const HEAD: &str = r"
local function live_head(now)
  while true do
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head then return nil end
    local expiry = redis.call('ZSCORE', KEYS[3], head)
    if expiry and tonumber(expiry) > now then return head end
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], head)
  end
end
local function wake(head)
  if head then
    redis.call('PUBLISH', 'zklock:wake:' .. string.match(head, '^(.*):'), head)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// ARGV: me, hold ttl ms, entry lease ms (0: do not queue), fair ('1'/'0'), token keep ms.
/// Returns `{1, token}` when `me` holds (granted now, or earlier by a call whose answer was
/// lost), `{0, ms}` when not: how long until the holder's key or the first waiter's entry
/// expires if nobody renews it (a silent holder or waiter is gone by then).
pub(crate) const ACQUIRE: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[4]) or '0')}
end
local head = live_head(now)
if not holder and (ARGV[4] == '0' or not head or head == ARGV[1]) then
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
    redis.call('LREM', KEYS[2], 1, ARGV[1])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = math.max(us, tonumber(redis.call('GET', KEYS[4]) or '0') + 1)
  redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', ARGV[5])
  return {1, token}
end
if ARGV[3] ~= '0' then
  if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    redis.call('RPUSH', KEYS[2], ARGV[1])
  end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, tonumber(redis.call('ZSCORE', KEYS[3], head)) - now}
";

/// ARGV: me. Deletes the holder key if it is `me`'s and wakes the first live waiter.
/// Returns 1 if it was ours, 0 if not (expired, or taken by another).
pub(crate) const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
wake(live_head(now))
return 1
";

/// ARGV: me. A waiter leaves the queue (timed out, cancelled); if it was first and the lock is
/// free, the next is woken.
const LEAVE: &str = r"
local first = redis.call('LINDEX', KEYS[2], 0) == ARGV[1]
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
end
if first and redis.call('EXISTS', KEYS[1]) == 0 then
  wake(live_head(now))
end
return 1
";

/// ARGV: me, hold ttl ms. Restarts the hold's TTL if the key is still `me`'s: 1, else 0.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// redis-py layout. ARGV: me, hold ttl ms. `{1, token}` when `me` holds (the token is the
/// server's clock in µs), else `{0, ms until the holder's key expires}`.
const PY_ACQUIRE: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
return {1, tonumber(t[1]) * 1000000 + tonumber(t[2])}
";

/// redis-py layout. ARGV: me. Compare-and-delete: 1 if it was ours.
const PY_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The scripts, each with its hash computed once.
pub(crate) struct Scripts {
    acquire: Script,
    release: Script,
    pub(crate) leave: Script,
    pub(crate) renew: Script,
    py_acquire: Script,
    py_release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        let with_head = |body: &str| Script::new(&format!("{HEAD}{body}"));
        Scripts {
            acquire: with_head(ACQUIRE),
            release: with_head(RELEASE),
            leave: with_head(LEAVE),
            renew: Script::new(RENEW),
            py_acquire: Script::new(PY_ACQUIRE),
            py_release: Script::new(PY_RELEASE),
        }
    }

    pub(crate) fn acquire(&self, layout: Layout) -> &Script {
        match layout {
            Layout::Queue => &self.acquire,
            Layout::RedisPy => &self.py_acquire,
        }
    }

    pub(crate) fn release(&self, layout: Layout) -> &Script {
        match layout {
            Layout::Queue => &self.release,
            Layout::RedisPy => &self.py_release,
        }
    }
}

/// A script called with the lock's keys (as [`Keys::all`] lists them).
pub(crate) fn invocation<'a>(script: &'a Script, keys: &Keys) -> redis::ScriptInvocation<'a> {
    let mut call = script.prepare_invoke();
    for key in keys.all() {
        call.key(key);
    }
    call
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_of_a_lock_share_one_hash_tag() {
        let keys = Keys::new("orders/42", Layout::Queue);
        for key in keys.all() {
            assert!(key.starts_with("zklock:{orders/42}"), "{key}");
        }
        assert_eq!(Keys::new("orders/42", Layout::RedisPy).all(), ["orders/42"]);
        assert_eq!(wake_channel("c1"), "zklock:wake:c1");
    }
}
