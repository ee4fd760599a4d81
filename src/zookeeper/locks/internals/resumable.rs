//! An attempt that parks without a thread: how a leader latch, and a selector while it waits,
//! go through the one lock algorithm.
//!
//! It runs the steps of a blocking attempt — our node's protected create, then the waiter of
//! `waiting.rs` — on whatever thread resumes it. Where a blocking attempt would park, it returns
//! [`Progress::Parked`] instead, and its waiter's next wake (a watch, a connection-state change,
//! a cancel) calls the hook it was given, whose job is to resume it. The waiter is registered
//! for state changes from the start, so an attempt its owner holds back while the Client is
//! disconnected is woken when it connects again. It has no
//! deadline: it ends granted, cancelled by `cancel_waiters`, or with an error. Whatever ends it
//! without the lock deletes our node in the background, and so does dropping it.

use std::sync::Arc;
use std::time::Instant;

use super::waiting::Memory;
use super::{Acquired, Cancel, LockInternals, Outcome, Store};
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::metrics;
use crate::zookeeper::client::{Call, Doomed, Registration, Stat};
use crate::zookeeper::locks::waiter::{Hook, Waiter};

/// What a resume came to.
pub(crate) enum Progress {
    /// Waiting for the node ahead: the hook will be called when it is time to resume.
    Parked,
    /// Granted, or ended without the lock (our node is being deleted).
    Done(Result<Acquired>),
}

/// One attempt to take a lock, resumed step by step (see the module's docs).
pub(crate) struct Resumable<S: Store> {
    lock: Arc<LockInternals<S>>,
    /// Woken by the watches of each node's waiter, by every connection-state change and by a
    /// cancel, for the attempt's whole life: a wake calls the hook.
    waiter: Arc<Waiter>,
    _registration: Registration,
    cancel: Cancel,
    call: Call,
    /// Our node once created, with its waiter's memory.
    node: Option<Node>,
    started: Instant,
}

struct Node {
    path: String,
    stat: Stat,
    mem: Memory,
}

impl<S: Store> Resumable<S> {
    /// An attempt on `lock`, not begun: call [`resume`](Self::resume). `hook` is called on every
    /// wake of its waiter, on the waking thread; it must not block.
    pub(crate) fn new(lock: Arc<LockInternals<S>>, hook: Hook) -> Self {
        let cancel = lock.cancel.lock().clone();
        let mut call = lock.store.new_call(Deadline::NEVER);
        call.cancel = Some(cancel.signal.clone());
        let waiter = Arc::new(Waiter::with_hook(hook));
        cancel.attach(&waiter);
        Resumable {
            _registration: lock.store.register(&waiter),
            waiter,
            lock,
            cancel,
            call,
            node: None,
            started: Instant::now(),
        }
    }

    /// Runs the attempt on the calling thread until it parks or ends. Each step blocks as the
    /// blocking attempt's does: a request waits for a connected session within the Client's
    /// retry policy.
    pub(crate) fn resume(&mut self) -> Progress {
        loop {
            let node = match &mut self.node {
                Some(node) => node,
                None => match self.lock.create_node(&mut self.call) {
                    Ok((path, stat, listing)) => {
                        let waiter = self.waiter.clone();
                        let mem =
                            Memory::new(&self.lock.store, waiter, true, &self.cancel, listing);
                        self.node.insert(Node { path, stat, mem })
                    }
                    Err(e) => return Progress::Done(Err(e)),
                },
            };
            let outcome = self.lock.resume_waiter(
                &node.path,
                &node.stat,
                &mut node.mem,
                &mut self.call,
                &self.cancel,
            );
            match outcome {
                Ok(None) => return Progress::Parked,
                Ok(Some(Outcome::Granted {
                    token,
                    mark,
                    primed,
                })) => {
                    let Node { path, stat, .. } = self.node.take().expect("ours was created");
                    metrics::acquired(&self.lock.path, self.started.elapsed());
                    let acquired = self.lock.granted(path, &stat, token, mark, primed);
                    return Progress::Done(Ok(acquired));
                }
                // No deadline: the waiter never times out, but a new node is harmless.
                Ok(Some(Outcome::Restart | Outcome::TimedOut)) => {
                    tracing::debug!(
                        "lock node {} is gone or stale; trying with a new one",
                        node.path
                    );
                    self.abandon();
                }
                Err(e) => {
                    self.abandon();
                    return Progress::Done(Err(e));
                }
            }
        }
    }

    /// Deletes our node, if any, in the background.
    fn abandon(&mut self) {
        if let Some(node) = self.node.take() {
            let owner = node.stat.ephemeral_owner;
            self.lock
                .store
                .delete_background(Doomed::node(&node.path, Some(owner)));
        }
    }
}

impl<S: Store> Drop for Resumable<S> {
    fn drop(&mut self) {
        self.abandon();
    }
}
