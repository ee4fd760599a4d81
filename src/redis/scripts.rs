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
//! A semaphore named `N` has the same four keys under `zklock:sem:{N}`, except that the first
//! is a sorted set of its leases (holder id → when the lease expires, server ms) in place of
//! the one holder's string: a lease that is not renewed is dropped by the next script that
//! looks, so a crashed holder's permit comes back one TTL after its last renewal.
//!
//! A read-write lock named `N` has the same keys under `zklock:rw:{N}` (the first is the sorted
//! set of its readers) and a fifth, `zklock:rw:{N}:writer`, the writer's id with a TTL. Its ids
//! end in `r` or `w` for the half they hold or wait for.
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
    /// A semaphore's: leases (a sorted set by expiry), queue, entry timeouts, last token.
    Semaphore,
    /// A read-write lock's: readers (a sorted set by expiry), queue, entry timeouts, last
    /// token, writer.
    ReadWrite,
}

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) layout: Layout,
    pub(crate) holder: String,
    queue: String,
    timeouts: String,
    token: String,
    pub(crate) writer: String,
}

impl Keys {
    pub(crate) fn new(name: &str, layout: Layout) -> Keys {
        let holder = match layout {
            Layout::Queue => format!("zklock:{{{name}}}"),
            Layout::RedisPy => name.to_owned(),
            Layout::Semaphore => format!("zklock:sem:{{{name}}}"),
            Layout::ReadWrite => format!("zklock:rw:{{{name}}}"),
        };
        Keys {
            layout,
            queue: format!("{holder}:queue"),
            timeouts: format!("{holder}:timeouts"),
            token: format!("{holder}:token"),
            writer: format!("{holder}:writer"),
            holder,
        }
    }

    /// The keys the layout's scripts take, in order.
    pub(crate) fn all(&self) -> Vec<&str> {
        match self.layout {
            Layout::Queue | Layout::Semaphore => {
                vec![&self.holder, &self.queue, &self.timeouts, &self.token]
            }
            Layout::RedisPy => vec![&self.holder],
            Layout::ReadWrite => vec![
                &self.holder,
                &self.queue,
                &self.timeouts,
                &self.token,
                &self.writer,
            ],
        }
    }
}

/// The channel a Client's waiters are woken on.
pub(crate) fn wake_channel(client: &str) -> String {
    format!("zklock:wake:{client}")
}

/// How long a token is remembered after its grant, in hold TTLs: a grant within that time of
/// the last one counts up from it even if the server's clock stepped back.
pub(crate) const TOKEN_KEEP_TTLS: u32 = 10;

/// Drops expired waiters from the head of the queue and returns the first live one (or nil).
/// `now` is the server's time in ms.
pub(crate) const HEAD: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
local function enqueue(me, lease)
  if lease ~= '0' then
    if not redis.call('ZSCORE', KEYS[3], me) then
      redis.call('RPUSH', KEYS[2], me)
    end
    redis.call('ZADD', KEYS[3], now + tonumber(lease), me)
    redis.call('PEXPIRE', KEYS[2], lease)
    redis.call('PEXPIRE', KEYS[3], lease)
  end
end
local function dequeue(me)
  if redis.call('ZREM', KEYS[3], me) == 1 then
    redis.call('LREM', KEYS[2], 1, me)
  end
end
local function next_token(keep)
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = math.max(us, tonumber(redis.call('GET', KEYS[4]) or '0') + 1)
  redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', keep)
  return token
end
local function wake(head)
  if head then
    redis.call('PUBLISH', 'zklock:wake:' .. string.match(head, '^(.*):'), head)
  end
end
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
  dequeue(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, next_token(ARGV[5])}
end
enqueue(ARGV[1], ARGV[3])
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
dequeue(ARGV[1])
if first and redis.call('EXISTS', KEYS[1]) == 0 then
  wake(live_head(now))
end
return 1
";

/// Semaphore. ARGV: me, lease ttl ms, entry lease ms (0: do not queue), max leases, token
/// keep ms. Drops expired leases; grants a lease if fewer than max are live and `me` is first
/// among the live waiters (or there are none), and then wakes the next waiter if a permit is
/// still free. Returns `{1, token}` when `me` has a lease (granted now, or earlier by a call
/// whose answer was lost: then the token is the last one granted), `{0, ms}` when not: how
/// long until the first lease or the first waiter's entry expires if nobody renews it.
const SEM_ACQUIRE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, tonumber(redis.call('GET', KEYS[4]) or '0')}
end
local head = live_head(now)
local live = redis.call('ZCARD', KEYS[1])
local max = tonumber(ARGV[4])
if live < max and (not head or head == ARGV[1]) then
  dequeue(ARGV[1])
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if live + 1 < max then
    wake(live_head(now))
  end
  return {1, next_token(ARGV[5])}
end
enqueue(ARGV[1], ARGV[3])
if live >= max then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
return {0, tonumber(redis.call('ZSCORE', KEYS[3], head)) - now}
";

/// Semaphore. ARGV: me. Returns `me`'s lease and wakes the first live waiter. 1 if the lease
/// was still live, 0 if it had expired or was gone.
const SEM_RELEASE: &str = r"
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
wake(live_head(now))
if expiry and tonumber(expiry) > now then
  return 1
end
return 0
";

/// Semaphore and read-write lock. ARGV: me. A waiter leaves the queue; if it was first, the
/// next is woken (it looks for itself whether it can be granted).
const LEAVE_WAKE: &str = r"
local first = redis.call('LINDEX', KEYS[2], 0) == ARGV[1]
dequeue(ARGV[1])
if first then
  wake(live_head(now))
end
return 1
";

/// Semaphore. ARGV: me, lease ttl ms. Extends `me`'s lease if it is still live: 1, else 0 (an
/// expired lease is dropped: its permit may have been granted to another).
const SEM_RENEW: &str = r"
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 0
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

/// Read-write lock. ARGV: me (ending in `r` or `w`), hold ttl ms, entry lease ms (0: do not
/// queue), the caller's own writer id ('' if its thread holds no write lock), token keep ms.
/// A writer is granted when nobody holds and it is first among the live waiters; a reader when
/// no writer holds and it is first — so a waiting writer holds back the readers behind it —
/// or at once, queue or not, when the writer is its own thread's (a downgrade). A granted
/// reader wakes the next waiter if that one reads too. Answers as the mutex's acquire.
const RW_ACQUIRE: &str = r"
local write = string.sub(ARGV[1], -1) == 'w'
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local writer = redis.call('GET', KEYS[5])
if (write and writer == ARGV[1]) or (not write and redis.call('ZSCORE', KEYS[1], ARGV[1])) then
  return {1, tonumber(redis.call('GET', KEYS[4]) or '0')}
end
local head = live_head(now)
local readers = redis.call('ZCARD', KEYS[1])
local downgrade = not write and ARGV[4] ~= '' and writer == ARGV[4]
local free
if write then
  free = not writer and readers == 0
else
  free = not writer or downgrade
end
if free and (downgrade or not head or head == ARGV[1]) then
  dequeue(ARGV[1])
  if write then
    redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    local next = live_head(now)
    if next and string.sub(next, -1) == 'r' then
      wake(next)
    end
  end
  return {1, next_token(ARGV[5])}
end
enqueue(ARGV[1], ARGV[3])
if writer then
  return {0, redis.call('PTTL', KEYS[5])}
end
if write and readers > 0 then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
return {0, tonumber(redis.call('ZSCORE', KEYS[3], head)) - now}
";

/// Read-write lock. ARGV: me. Releases `me`'s half; once no writer holds, wakes the first
/// live waiter if it reads, or if it writes and no reader is left. 1 if the hold was still
/// `me`'s, else 0.
const RW_RELEASE: &str = r"
local ours = 0
if string.sub(ARGV[1], -1) == 'w' then
  if redis.call('GET', KEYS[5]) == ARGV[1] then
    redis.call('DEL', KEYS[5])
    ours = 1
  end
else
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if expiry and tonumber(expiry) > now then
    ours = 1
  end
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('GET', KEYS[5]) then
  local head = live_head(now)
  if head and (string.sub(head, -1) == 'r' or redis.call('ZCARD', KEYS[1]) == 0) then
    wake(head)
  end
end
return ours
";

/// Read-write lock. ARGV: me, hold ttl ms. Extends `me`'s hold if it is still `me`'s: 1, else
/// 0.
const RW_RENEW: &str = r"
if string.sub(ARGV[1], -1) == 'w' then
  if redis.call('GET', KEYS[5]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[5], ARGV[2])
    return 1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 0
";

/// The scripts, each with its hash computed once.
pub(crate) struct Scripts {
    acquire: Script,
    release: Script,
    leave: Script,
    renew: Script,
    py_acquire: Script,
    py_release: Script,
    sem_acquire: Script,
    sem_release: Script,
    leave_wake: Script,
    sem_renew: Script,
    rw_acquire: Script,
    rw_release: Script,
    rw_renew: Script,
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
            sem_acquire: with_head(SEM_ACQUIRE),
            sem_release: with_head(SEM_RELEASE),
            leave_wake: with_head(LEAVE_WAKE),
            sem_renew: with_head(SEM_RENEW),
            rw_acquire: with_head(RW_ACQUIRE),
            rw_release: with_head(RW_RELEASE),
            rw_renew: with_head(RW_RENEW),
        }
    }

    pub(crate) fn acquire(&self, layout: Layout) -> &Script {
        match layout {
            Layout::Queue => &self.acquire,
            Layout::RedisPy => &self.py_acquire,
            Layout::Semaphore => &self.sem_acquire,
            Layout::ReadWrite => &self.rw_acquire,
        }
    }

    pub(crate) fn release(&self, layout: Layout) -> &Script {
        match layout {
            Layout::Queue => &self.release,
            Layout::RedisPy => &self.py_release,
            Layout::Semaphore => &self.sem_release,
            Layout::ReadWrite => &self.rw_release,
        }
    }

    /// The script that takes a waiter out of the queue; `None` for a layout without one.
    pub(crate) fn leave(&self, layout: Layout) -> Option<&Script> {
        match layout {
            Layout::Queue => Some(&self.leave),
            Layout::RedisPy => None,
            // A waiter that leaves wakes the next one, which looks for itself.
            Layout::Semaphore | Layout::ReadWrite => Some(&self.leave_wake),
        }
    }

    pub(crate) fn renew(&self, layout: Layout) -> &Script {
        match layout {
            Layout::Queue | Layout::RedisPy => &self.renew,
            Layout::Semaphore => &self.sem_renew,
            Layout::ReadWrite => &self.rw_renew,
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
