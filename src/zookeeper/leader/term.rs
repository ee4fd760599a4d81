//! One term of leadership, shared by both leader recipes: our node holds the election's lock,
//! the keeper follows it, and the term ends when the leader steps down, when it is interrupted
//! or closed, or when the node's health breaks the error policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::core::health::LockHealth;
use crate::zookeeper::client::{Client, ConnectionState, ErrorPolicy, Parked, Registration};
use crate::zookeeper::locks::keeper::{keep_node, vouch, KeeperGuard};
use crate::zookeeper::locks::Acquired;

pub(crate) struct Term {
    client: Client,
    node: String,
    epoch: u64,
    session: i64,
    policy: ErrorPolicy,
    state: Arc<State>,
    _keeper: KeeperGuard,
    /// Every connection-state change is looked at while the term lasts.
    _states: (Arc<OnState>, Registration),
}

/// Ends a term on a connection state that breaks its policy (`Suspended` under `Standard`,
/// `Lost` always), however short: the keeper reports what it sees of the node, and a
/// disconnection over before the keeper looked would not reach it (Curator's latch gives
/// leadership up on every `SUSPENDED`). Called on the I/O thread right after the Client records
/// the state.
struct OnState {
    client: Client,
    policy: ErrorPolicy,
    state: Arc<State>,
}

impl Parked for OnState {
    fn state_changed(&self) {
        let health = match self.client.state() {
            Some(ConnectionState::Suspended) => LockHealth::Suspended,
            Some(ConnectionState::Lost) => LockHealth::Lost,
            _ => return,
        };
        if breaks(self.policy, health) && !self.state.inner.lock().over {
            tracing::info!("leadership given up: the connection is {health:?}");
            self.state.end();
        }
    }
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
    changed: Condvar,
}

struct Inner {
    /// The keeper's last report.
    health: LockHealth,
    over: bool,
    /// Told once when the term ends.
    waiting: Vec<Sender<()>>,
    /// Called once when the term ends, on the thread that ends it.
    hooks: Vec<Box<dyn FnOnce() + Send>>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            health: LockHealth::Held,
            over: false,
            waiting: Vec::new(),
            hooks: Vec::new(),
        }
    }
}

impl State {
    fn end(&self) {
        let (waiting, hooks) = {
            let mut inner = self.inner.lock();
            inner.over = true;
            (
                std::mem::take(&mut inner.waiting),
                std::mem::take(&mut inner.hooks),
            )
        };
        self.changed.notify_all();
        for tx in waiting {
            let _ = tx.send(());
        }
        for hook in hooks {
            hook();
        }
    }
}

/// Whether `health` ends a term under `policy`.
pub(crate) fn breaks(policy: ErrorPolicy, health: LockHealth) -> bool {
    match policy {
        ErrorPolicy::SessionOnly => health == LockHealth::Lost,
        _ => health != LockHealth::Held,
    }
}

impl Term {
    /// Begins a term on a granted node; the keeper's reports end it (on the I/O thread) when
    /// the node's health breaks `policy`.
    pub(crate) fn begin(client: &Client, acquired: Acquired, policy: ErrorPolicy) -> Term {
        let state = Arc::new(State::default());
        let report = {
            let state = state.clone();
            move |health: LockHealth| {
                let ends = {
                    let mut inner = state.inner.lock();
                    if inner.health != LockHealth::Lost {
                        inner.health = health;
                    }
                    !inner.over && breaks(policy, inner.health)
                };
                state.changed.notify_all();
                if ends {
                    tracing::info!("leadership given up: the node is {health:?}");
                    state.end();
                }
            }
        };
        let keeper = keep_node(
            client,
            &acquired.path,
            acquired.session,
            Arc::new(report),
            None,
            acquired.primed,
        );
        let on_state = Arc::new(OnState {
            client: client.clone(),
            policy,
            state: state.clone(),
        });
        Term {
            client: client.clone(),
            node: acquired.path,
            epoch: acquired.token,
            session: acquired.session,
            policy,
            _states: (on_state.clone(), client.park(on_state)),
            state,
            _keeper: keeper,
        }
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    pub(crate) fn session(&self) -> i64 {
        self.session
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The node's health now (see [`LockHealth`]: computed at call time).
    pub(crate) fn health(&self) -> LockHealth {
        let reported = self.state.inner.lock().health;
        vouch(&self.client, self.session, reported)
    }

    /// Ended, or its health now breaks the policy.
    pub(crate) fn is_over(&self) -> bool {
        self.state.inner.lock().over || breaks(self.policy, self.health())
    }

    pub(crate) fn end(&self) {
        self.state.end();
    }

    /// Whether [`end`](Self::end) was called (by anyone, or by the keeper's report); unlike
    /// [`is_over`](Self::is_over), not whether the health breaks the policy now.
    pub(crate) fn is_ended(&self) -> bool {
        self.state.inner.lock().over
    }

    /// Runs `hook` once the term ends, on the thread that ends it (at once if it has); it must
    /// not block.
    pub(crate) fn on_end(&self, hook: impl FnOnce() + Send + 'static) {
        let mut inner = self.state.inner.lock();
        if inner.over {
            drop(inner);
            hook();
        } else {
            inner.hooks.push(Box::new(hook));
        }
    }

    /// Waits until the term is over, at most `timeout` (`None`: no bound); whether it is.
    pub(crate) fn wait_over(&self, timeout: Option<Duration>) -> bool {
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut inner = self.state.inner.lock();
        loop {
            if inner.over {
                return true;
            }
            // The local lease is not reported: look at it now and then.
            let check = Instant::now() + Duration::from_millis(200);
            let wake = until.map_or(check, |u| u.min(check));
            self.state.changed.wait_until(&mut inner, wake);
            if inner.over {
                return true;
            }
            drop(inner);
            if self.is_over() {
                self.end();
                return true;
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return false;
            }
            inner = self.state.inner.lock();
        }
    }

    /// A channel that receives `()` once, when the term is over.
    pub(crate) fn over_channel(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut inner = self.state.inner.lock();
        if inner.over {
            let _ = tx.send(());
        } else {
            inner.waiting.push(tx);
        }
        rx
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.state.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_says_which_health_ends_a_term() {
        use LockHealth::*;
        assert!(!breaks(ErrorPolicy::Standard, Held));
        assert!(breaks(ErrorPolicy::Standard, Suspended));
        assert!(breaks(ErrorPolicy::Standard, Lost));
        assert!(!breaks(ErrorPolicy::SessionOnly, Suspended));
        assert!(breaks(ErrorPolicy::SessionOnly, Lost));
    }
}
