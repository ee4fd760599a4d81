//! Waking waiters: each Client subscribes to one channel of its own, and a releasing holder's
//! script publishes the next waiter's id there. The Client's subscriber thread
//! (`zklock-redis-sub`) reads the channel and unparks that waiter. Nothing is subscribed or
//! unsubscribed per lock or per waiter.
//!
//! A message can be lost (the subscriber connection broke, the server restarted): after the
//! subscriber reconnects every parked waiter is woken to look again, and each waiter looks
//! again by itself at its bounded re-check interval in any case.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::scripts::wake_channel;
use super::server::Server;
use crate::core::error::{Error, Result};

/// How long the subscriber waits for a message before it looks at the closed flag.
const POLL: Duration = Duration::from_millis(250);

/// What else a wake-up does: tell the thread that acts for a waiter without a thread of its
/// own (the keeper, for a latch).
pub(crate) type Hook = Arc<dyn Fn() + Send + Sync>;

/// One parked waiter.
#[derive(Default)]
pub(crate) struct Parker {
    woken: Mutex<bool>,
    cv: Condvar,
    hook: Option<Hook>,
}

impl Parker {
    pub(crate) fn wake(&self) {
        *self.woken.lock() = true;
        self.cv.notify_all();
        if let Some(hook) = &self.hook {
            hook();
        }
    }

    /// Whether a wake-up came since the last look, without waiting. The wake is consumed.
    pub(crate) fn take_wake(&self) -> bool {
        std::mem::take(&mut *self.woken.lock())
    }

    /// Parks until woken or `until`; whether it was woken. The wake is consumed.
    pub(crate) fn park_until(&self, until: Instant) -> bool {
        let mut woken = self.woken.lock();
        while !*woken {
            if self.cv.wait_until(&mut woken, until).timed_out() {
                break;
            }
        }
        std::mem::take(&mut *woken)
    }
}

/// The parked waiters of one Client, by waiter id.
#[derive(Default)]
pub(crate) struct Wakes {
    parked: Mutex<HashMap<String, Arc<Parker>>>,
}

impl Wakes {
    /// Registers a waiter; it stays registered until the returned entry drops.
    pub(crate) fn register(self: &Arc<Self>, id: &str) -> Registered {
        self.register_with(id, None)
    }

    /// Registers a waiter whose wake-ups also call `hook`.
    pub(crate) fn register_with(self: &Arc<Self>, id: &str, hook: Option<Hook>) -> Registered {
        let parker = Arc::new(Parker {
            hook,
            ..Parker::default()
        });
        self.parked.lock().insert(id.to_owned(), parker.clone());
        Registered {
            wakes: self.clone(),
            id: id.to_owned(),
            parker,
        }
    }

    fn wake(&self, id: &str) {
        if let Some(p) = self.parked.lock().get(id) {
            p.wake();
        }
    }

    /// Wakes every parked waiter (a message may have been lost, or the Client is closing).
    pub(crate) fn wake_all(&self) {
        for p in self.parked.lock().values() {
            p.wake();
        }
    }
}

/// A waiter's registration; unregisters on drop.
pub(crate) struct Registered {
    wakes: Arc<Wakes>,
    id: String,
    pub(crate) parker: Arc<Parker>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.wakes.parked.lock().remove(&self.id);
    }
}

/// Subscribes to the Client's channel and starts the subscriber thread. Returns once the
/// subscription is confirmed, so that no wake-up published after it is missed.
pub(crate) fn start_subscriber(
    client: Server,
    id: &str,
    connect_timeout: Duration,
    wakes: Arc<Wakes>,
    closed: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    let channel = wake_channel(id);
    let (ready, subscribed) = crossbeam_channel::bounded(1);
    let thread = std::thread::Builder::new()
        .name("zklock-redis-sub".into())
        .spawn(move || run(client, channel, connect_timeout, ready, wakes, closed))
        .map_err(|e| Error::thread_start("zklock-redis-sub", &e))?;
    match subscribed.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(super::error::error(e))
        }
        Err(_) => Err(Error::thread_start(
            "zklock-redis-sub",
            &std::io::Error::other("the subscriber thread ended before subscribing"),
        )),
    }
}

/// The subscriber thread: (re)connects and subscribes, then reads wake-ups until the Client
/// closes. The first subscription's outcome goes to `ready`; if it fails the thread ends.
fn run(
    client: Server,
    channel: String,
    timeout: Duration,
    ready: crossbeam_channel::Sender<redis::RedisResult<()>>,
    wakes: Arc<Wakes>,
    closed: Arc<AtomicBool>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(50);
    while !closed.load(Ordering::Acquire) {
        let moves = client.moves();
        let connected = client.connect(timeout, timeout);
        let mut conn = match connected {
            Ok(c) => c,
            Err(e) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(e));
                    return;
                }
                tracing::debug!("zklock: Redis subscriber cannot connect: {e}");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // The subscription lasts as long as `pubsub`: dropping it unsubscribes.
        let mut pubsub = conn.as_pubsub();
        let subscribed = pubsub
            .subscribe(&channel)
            .and_then(|()| pubsub.set_read_timeout(Some(POLL)));
        match (subscribed, ready.take()) {
            (Ok(()), Some(ready)) => {
                let _ = ready.send(Ok(()));
            }
            (Ok(()), None) => {
                tracing::debug!("zklock: Redis subscriber connected again");
                backoff = Duration::from_millis(50);
                wakes.wake_all();
            }
            (Err(e), Some(ready)) => {
                let _ = ready.send(Err(e));
                return;
            }
            (Err(e), None) => {
                tracing::debug!("zklock: Redis subscriber cannot subscribe: {e}");
                std::thread::sleep(backoff);
                continue;
            }
        }
        while !closed.load(Ordering::Acquire) {
            match pubsub.get_message() {
                Ok(msg) => {
                    if let Ok(id) = msg.get_payload::<String>() {
                        wakes.wake(&id);
                    }
                }
                Err(e) if e.is_timeout() && client.moves() == moves => {}
                Err(e) => {
                    // Lost, or on a node that is no longer the primary (which may say
                    // nothing): wake-ups are published on the new one.
                    tracing::debug!("zklock: Redis subscriber connection lost: {e}");
                    wakes.wake_all();
                    break;
                }
            }
        }
    }
    wakes.wake_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_before_the_park_is_kept_and_consumed_once() {
        let wakes = Arc::new(Wakes::default());
        let me = wakes.register("c:1");
        wakes.wake("c:1");
        wakes.wake("c:2"); // nobody: ignored
        let soon = || Instant::now() + Duration::from_millis(20);
        assert!(me.parker.park_until(soon()));
        assert!(!me.parker.park_until(soon()), "consumed");
        drop(me);
        assert!(wakes.parked.lock().is_empty());
    }
}
