//! The keeper's renewal round: every hold renewed in one pipeline per node (with `WAIT` for
//! replicated grants), its lease extended from the send time, a lost key read `Lost`; a `TIME`
//! when nothing is held.

use std::time::Duration;

use super::{evalsha, ms, Renewing, Run};
use crate::core::health::LockHealth;
use crate::core::lease::boot_clock;
use crate::core::server_clock::Step;
use crate::redis::cluster::Redirect;
use crate::redis::server::{route as route_of, Route};

impl Run {
    /// Renews every hold: one pipeline per node (one on a single server), each reading the
    /// node's clock first. On a cluster a group that met a redirect or a failed connection is
    /// sent once more, grouped by the slot map read again. Whether the server answered (no
    /// connection found broken).
    pub(super) fn renew(&mut self) -> bool {
        let batch: Vec<Renewing> = self
            .shared
            .holds
            .lock()
            .iter()
            .map(|(id, k)| {
                let (keys, owner) = (k.keys.clone(), k.owner.clone());
                (*id, keys, owner, k.lease.clone(), k.report.clone())
            })
            .collect();
        if batch.is_empty() {
            return self.ping();
        }
        self.fresh_map(None);
        let mut pending = batch;
        let mut broken = false;
        // The holds of a slot being moved whose keys are on the node it moves to, which an
        // `ASK` names: renewed there, after `ASKING`.
        let mut asked: Vec<(String, Vec<Renewing>)> = Vec::new();
        for pass in 0..2 {
            let groups = self.group(std::mem::take(&mut pending), |r| &r.1);
            for (route, items) in groups {
                match self.renew_group((route, None), items) {
                    Ok(()) => {}
                    Err((e, _, _)) if pass > 0 || self.server.as_cluster().is_none() => {
                        tracing::debug!("zklock: Redis renewal failed: {e}");
                        broken |=
                            crate::redis::error::broken(&e) || self.server.as_cluster().is_some();
                    }
                    Err((_, Some(Redirect::Ask { slot, node }), items)) => {
                        let (there, rest) = items
                            .into_iter()
                            .partition(|r| route_of(&r.1) == Some(slot));
                        asked.push((node, there));
                        pending.extend(rest);
                    }
                    Err((_, _, items)) => pending.extend(items),
                }
            }
            for (node, items) in std::mem::take(&mut asked) {
                if let Err((e, _, _)) = self.renew_group((None, Some(&node)), items) {
                    tracing::debug!("zklock: Redis renewal on {node} after ASK failed: {e}");
                    broken = true;
                }
            }
            if pending.is_empty() {
                break;
            }
            self.fresh_map(None);
        }
        if broken {
            self.states.failed();
        }
        !broken
    }

    /// Renews the holds of one node in one pipeline, sent for `route`, or to the cluster node
    /// `at` with `ASKING` before each renewal; the error (and the redirect it is, if one) and
    /// the holds back if it failed.
    pub(super) fn renew_group(
        &mut self,
        (route, at): (Route, Option<&str>),
        batch: Vec<Renewing>,
    ) -> std::result::Result<(), (redis::RedisError, Option<Redirect>, Vec<Renewing>)> {
        let ttl_ms = ms(self.ttl).to_string();
        let scripts = self.scripts.clone();
        // The server's clock first, then every renewal: a step it shows happened before the
        // renewals ran, so they see its effect (a key it expired is gone).
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        let mut used = Vec::new();
        for (_, keys, owner, _, _) in &batch {
            let renew = scripts.renew(keys.layout);
            if at.is_some() {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(evalsha(renew, keys, &[owner, &ttl_ms]));
            used.push(renew);
        }
        if let Some(r) = self.replicas {
            pipe.add_command(r.wait());
        }
        let mut sent = Duration::ZERO;
        let (mut node, mut answers): (String, redis::RedisResult<Vec<redis::Value>>) =
            self.query((route, at), &pipe, &used, None, &mut sent);
        if matches!(&answers, Err(e) if !e.is_timeout() && crate::redis::error::broken(e)) {
            // The connection was found closed (the server restarted, or dropped it, or is no
            // longer the primary): renew at once on a new one, so that a hold the server
            // forgot reads Lost now rather than a period later. A server that does not answer
            // is not asked twice.
            (node, answers) = self.query((route, at), &pipe, &used, None, &mut sent);
        }
        let answered = boot_clock();
        let mut answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                let redirect = crate::redis::cluster::redirect(&e, &node);
                return Err((e, redirect, batch));
            }
        };
        self.states.heard(sent);
        // Replicated grants: the batch counts only if enough replicas have it.
        let confirmed = match self.replicas {
            None => true,
            Some(r) => {
                let acked = answers
                    .pop()
                    .and_then(|a| redis::from_redis_value::<i64>(a).ok())
                    .unwrap_or(0);
                if acked < i64::from(r.count) {
                    tracing::warn!(
                        "zklock: a Redis renewal reached {acked} of the {} replicas asked for \
                         within {:?}: it does not count",
                        r.count,
                        r.timeout
                    );
                }
                acked >= i64::from(r.count)
            }
        };
        let mut answers = answers.into_iter();
        let step = answers
            .next()
            .and_then(|time| self.clock_read(&node, &time, sent, answered));
        let mut lost = 0;
        for ((id, _, _, lease, report), ours) in batch.into_iter().zip(answers) {
            if redis::from_redis_value::<i64>(ours).is_ok_and(|ours| ours == 1) {
                if confirmed {
                    lease.heard_at(sent);
                }
                if let Some(k) = self.shared.holds.lock().get_mut(&id) {
                    k.doubted = step.is_some();
                }
            } else if self.shared.holds.lock().remove(&id).is_none() {
                // Released while its renewal was in flight (the release reached the server
                // first): no loss.
            } else {
                match step {
                    Some(Step::Forward(by)) => tracing::warn!(
                        "zklock: a Redis lock or lease was lost: the clock of the server {} \
                         stepped forward by {:.1} s, and its key expired early",
                        self.shown,
                        by.as_secs_f64()
                    ),
                    _ => tracing::warn!(
                        "zklock: a Redis lock or lease was lost: it expired or was taken"
                    ),
                }
                lost += 1;
                report(LockHealth::Lost);
            }
        }
        if let Some(step) = step {
            self.log_step(&node, step, lost);
        }
        Ok(())
    }

    /// Without holds to renew, a `TIME` tells whether the server answers (returned), and
    /// keeps the watch on its clock.
    pub(super) fn ping(&mut self) -> bool {
        let Some((node, conn)) = self.conn_by(None, None) else {
            self.states.failed();
            return false;
        };
        let sent = boot_clock();
        match redis::cmd("TIME").query::<redis::Value>(conn) {
            Ok(time) => {
                self.states.heard(sent);
                if let Some(step) = self.clock_read(&node, &time, sent, boot_clock()) {
                    self.log_step(&node, step, 0);
                }
                true
            }
            Err(e) => {
                tracing::debug!("zklock: Redis TIME failed: {e}");
                self.conns.remove(&node);
                if let Some(cluster) = self.server.as_cluster() {
                    cluster.suspect();
                }
                self.states.failed();
                false
            }
        }
    }
}
