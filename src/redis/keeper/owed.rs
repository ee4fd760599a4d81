//! What the keeper owes: the releases and queue exits the callers could not finish in their
//! time, paid in one pipeline; and the Client's close, which owes everything it holds.

use std::time::{Duration, Instant};

use super::{evalsha, Keeping, Kept, Owed, Run};
use crate::core::health::LockHealth;
use crate::redis::scripts::{wake_channel, Keys};
use crate::redis::sentinel::share;

impl Run {
    /// Pays what is owed, every release and queue exit in one pipeline; what fails stays owed
    /// until its own give-up time. With `by` (a close), waits for the connection and the
    /// answer until then at most, and publishes the close's wake-ups in the same pipeline.
    pub(super) fn pay_owed(&mut self, by: Option<Instant>) {
        let owed = std::mem::take(&mut *self.shared.owed.lock());
        let wakes = match by {
            Some(_) => std::mem::take(&mut *self.shared.closing_wakes.lock()),
            None => Vec::new(),
        };
        let scripts = self.scripts.clone();
        // A layout without a queue has nothing to leave.
        let owed: Vec<Owed> = owed
            .into_iter()
            .filter(|o| !o.leave || scripts.leave(o.keys.layout).is_some())
            .collect();
        if owed.is_empty() && wakes.is_empty() {
            return;
        }
        if !owed.is_empty() {
            self.fresh_map(by);
        }
        let mut groups = self.group(owed, |o| &o.keys);
        if groups.is_empty() {
            groups.push((None, Vec::new()));
        }
        // A close's wake-ups go with the first group: a PUBLISH on any node of a cluster
        // reaches every node's subscribers.
        let mut wakes = Some(wakes);
        let n = groups.len();
        for (k, (route, paying)) in groups.into_iter().enumerate() {
            // A close gives each node's pipeline a share of what is left: a frozen primary
            // costs its share, and what the others hold is released.
            let by = by.map(|by| match share(by, n - k) {
                Some(share) => Instant::now() + share,
                None => by,
            });
            let mut pipe = redis::pipe();
            for client in wakes.take().unwrap_or_default() {
                pipe.cmd("PUBLISH")
                    .arg(wake_channel(&client))
                    .arg("")
                    .ignore();
            }
            let mut used = Vec::new();
            for o in &paying {
                let script = match o.leave {
                    true => scripts.leave(o.keys.layout),
                    false => Some(scripts.release(o.keys.layout)),
                };
                let Some(script) = script else { continue };
                pipe.add_command(evalsha(script, &o.keys, &[&o.owner]));
                used.push(script);
            }
            let mut sent = Duration::ZERO;
            // A close goes by the map it read first: a node that fails in its share marks the
            // map stale, which must not make the others read it again in theirs.
            let at = match (by, self.server.as_cluster(), route) {
                (Some(_), Some(cluster), Some(slot)) => cluster.serving(slot),
                _ => None,
            };
            let (_, paid): (String, redis::RedisResult<Vec<redis::Value>>) =
                self.query((route, at.as_deref()), &pipe, &used, by, &mut sent);
            match paid {
                Ok(_) => {}
                Err(e)
                    if !crate::redis::error::broken(&e) && self.server.as_cluster().is_none() =>
                {
                    // Sending it again would not help.
                    tracing::warn!("zklock: Redis refused a release or a queue exit: {e}");
                }
                Err(e) => {
                    // (On a cluster a refusal is most likely a redirect: sent again next round,
                    // by the map read again.)
                    tracing::debug!("zklock: Redis release failed, will retry: {e}");
                    let now = Instant::now();
                    let mut paying = paying;
                    paying.retain(|o| now < o.give_up);
                    self.shared.owed.lock().extend(paying);
                }
            }
        }
    }

    /// The Client is closing: what it holds is released, its waiters' queue entries taken
    /// out, what it owes paid, all in one pipeline, giving up at the close's give-up time.
    pub(super) fn finish(&mut self) {
        let give_up = (*self.shared.give_up.lock())
            .unwrap_or_else(|| Instant::now() + self.operation_timeout);
        self.ticks_arrive();
        for mut t in std::mem::take(&mut self.ticking) {
            t.finish(&mut Keeping { run: self });
        }
        let queued: Vec<(String, Keys)> = self.shared.queued.lock().drain().collect();
        for (owner, keys) in &queued {
            self.shared.owe(keys, owner, give_up, true);
        }
        let holds: Vec<Kept> = self.shared.holds.lock().drain().map(|(_, k)| k).collect();
        for k in &holds {
            self.shared.owe(&k.keys, &k.owner, give_up, false);
        }
        for k in holds {
            (k.report)(LockHealth::Lost);
        }
        loop {
            self.pay_owed(Some(give_up));
            let now = Instant::now();
            if self.shared.owed.lock().is_empty() || now >= give_up {
                break;
            }
            std::thread::sleep((give_up - now).min(Duration::from_millis(20)));
        }
        let left = self.shared.owed.lock().len();
        if left > 0 {
            tracing::warn!(
                "zklock: {left} Redis release(s) or queue exit(s) not done at close: they expire \
                 by their TTL"
            );
        }
    }
}
