//! Waiting slots: a few subscriber connections per Client, each on a channel of its own, on
//! which a waiting thread reads its wake-up itself — no thread between the releasing holder's
//! message and the waiter. A waiter that finds no free slot (more than [`MAX_SLOTS`] wait at
//! once in this Client) is woken through the Client's shared channel and subscriber thread,
//! as a leader latch always is.
//!
//! A waiter on a slot reads in slices of at most [`SLICE`], so that a cancel, a close or a
//! wake of every waiter (the shared subscriber reconnected) reaches it within one slice; a
//! close also publishes on every slot's channel, which reaches it at once.
//! Messages left on a slot for an earlier waiter are skipped: each names its waiter.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::server::Server;

/// How many threads of one Client wait on slots of their own at once.
const MAX_SLOTS: usize = 4;

/// The longest read of a slot: how late a cancel or a close may reach its waiter.
const SLICE: Duration = Duration::from_millis(100);

/// The Client's slots.
pub(crate) struct Slots {
    redis: Server,
    client_id: String,
    connect_timeout: Duration,
    idle: Mutex<Vec<Slot>>,
    /// Slots that exist (idle or in use).
    made: AtomicUsize,
    /// The prefixes of the slots that exist.
    live: Mutex<Vec<String>>,
    next: AtomicU64,
}

/// One subscriber connection, subscribed to `zklock:wake:CLIENT/N`.
pub(crate) struct Slot {
    /// What goes before the `:` of a waiter id on this slot (`CLIENT/N`).
    prefix: String,
    conn: redis::Connection,
    /// The server, and how many times its primary had moved when this slot subscribed.
    server: Server,
    moves: u64,
}

impl Slots {
    pub(crate) fn new(redis: Server, client_id: &str, connect_timeout: Duration) -> Slots {
        Slots {
            redis,
            client_id: client_id.to_owned(),
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            made: AtomicUsize::new(0),
            live: Mutex::new(Vec::new()),
            next: AtomicU64::new(1),
        }
    }

    /// A free slot, or a new one (opened within `within` and the connection timeout) while
    /// fewer than [`MAX_SLOTS`] exist; `None` otherwise, or if a new one cannot be opened (the
    /// waiter then uses the shared channel).
    pub(crate) fn take(&self, within: Duration) -> Option<Slot> {
        if let Some(slot) = self.idle.lock().pop() {
            return Some(slot);
        }
        let made = self.made.fetch_add(1, Ordering::AcqRel);
        if made >= MAX_SLOTS {
            self.made.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        match self.open(within) {
            Ok(slot) => {
                self.live.lock().push(slot.prefix.clone());
                Some(slot)
            }
            Err(e) => {
                self.made.fetch_sub(1, Ordering::AcqRel);
                tracing::debug!("zklock: a Redis waiting slot cannot be opened: {e}");
                None
            }
        }
    }

    fn open(&self, within: Duration) -> redis::RedisResult<Slot> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let timeout = within
            .min(self.connect_timeout)
            .max(Duration::from_millis(1));
        self.subscribe(format!("{}/{n}", self.client_id), timeout)
    }

    /// A slot whose connection broke, connected and subscribed again on the same channel (its
    /// waiter's id names that channel, so that its wake-up comes there and nowhere else),
    /// taking at most `within` (and the connection timeout). If that fails the broken slot
    /// is returned, to be opened again at the waiter's next turn (a failover, a restart: the
    /// server comes back, and the wake-up with it).
    pub(crate) fn reopen(&self, broken: Slot, within: Duration) -> Slot {
        let timeout = within
            .min(self.connect_timeout)
            .max(Duration::from_millis(1));
        match self.subscribe(broken.prefix.clone(), timeout) {
            Ok(slot) => slot,
            Err(e) => {
                tracing::debug!("zklock: a Redis waiting slot cannot be opened again yet: {e}");
                broken
            }
        }
    }

    fn subscribe(&self, prefix: String, timeout: Duration) -> redis::RedisResult<Slot> {
        let moves = self.redis.moves();
        let mut conn = self.redis.connect(timeout, timeout)?;
        let subscribe = redis::cmd("SUBSCRIBE")
            .arg(super::scripts::wake_channel(&prefix))
            .get_packed_command();
        conn.send_packed_command(&subscribe)?;
        // The confirmation: from here on, nothing published to the channel is missed.
        conn.recv_response()?;
        Ok(Slot {
            prefix,
            conn,
            server: self.redis.clone(),
            moves,
        })
    }

    /// Gives a slot back for the next waiter.
    pub(crate) fn give_back(&self, slot: Slot) {
        self.idle.lock().push(slot);
    }

    /// The prefixes of the slots that exist, idle or in use (for a close to publish on).
    pub(crate) fn prefixes(&self) -> Vec<String> {
        self.live.lock().clone()
    }

    /// Closes the idle slots (the Client is closing; a slot in use closes when its waiter,
    /// which sees the close within a slice, gives it back).
    pub(crate) fn close(&self) {
        self.idle.lock().clear();
    }
}

impl Slot {
    /// The prefix of waiter ids on this slot (`CLIENT/N`, in place of `CLIENT`).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Waits until the message for `waiter` comes (`Ok(true)`), `until` passes (`Ok(false)`),
    /// or `interrupted` says so at a slice's end (`Ok(true)`: look again). An error: the
    /// connection broke. Messages for an earlier waiter on this slot are skipped.
    ///
    /// Reads go through the `redis` crate's pub/sub reader (`PubSub::get_message`), never
    /// `recv_response`: the latter takes a read that timed out for a reply still owed and
    /// throws the next thing read away, so a slice that ended without a message would cost the
    /// waiter its wake-up. `get_message` reads messages, which no timeout discards, and
    /// whatever arrived in part before a slice ended stays in the parser for the next read.
    /// RESP3 push would do too, but needs Redis 6; zklock runs on Redis 5. The `PubSub`
    /// borrow is never dropped: its drop unsubscribes, and the slot stays subscribed between
    /// waits. It owns nothing else (its buffer of early messages is only filled by a
    /// subscribe or a ping through it, which a slot never sends).
    pub(crate) fn park_until(
        &mut self,
        waiter: &str,
        until: Instant,
        interrupted: impl Fn() -> bool,
    ) -> redis::RedisResult<bool> {
        let mut reader = ManuallyDrop::new(self.conn.as_pubsub());
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            reader.set_read_timeout(Some(left.min(SLICE).max(Duration::from_millis(1))))?;
            match reader.get_message() {
                Ok(message) => {
                    // Another waiter's, or a close's (which is an interruption).
                    if message.get_payload_bytes() == waiter.as_bytes() || interrupted() {
                        return Ok(true);
                    }
                }
                Err(e) if e.is_timeout() => {
                    if interrupted() {
                        return Ok(true);
                    }
                    if self.server.moves() != self.moves {
                        // Subscribed on a node that is no longer the primary (and may say
                        // nothing): wake-ups are published on the new one.
                        return Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::NotConnected,
                            "the primary moved",
                        )));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
