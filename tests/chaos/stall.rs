//! What a lock that stopped being written looks like, for the report: its queue as the
//! ensemble has it (each node's owner, the slot whose session that is, the member serving it),
//! its register's last events and who is inside, and what every zklock slot says it is doing.

use super::*;

/// How many of a register's last events the report shows.
const LAST_EVENTS: usize = 8;

impl Lab {
    /// Notes, for each lock of `stalled`, its queue and its register's last events, then every
    /// zklock slot's own account (`dump`): phase, token, session, connection state, members,
    /// last error.
    pub(crate) fn stall_report(
        &self,
        stalled: &[&Register],
        workers: &mut [WorkerProc],
        row: &mut Row,
    ) {
        let mut slot_of: BTreeMap<i64, String> = BTreeMap::new();
        for w in workers.iter_mut() {
            for (slot, s) in w.sessions().1 {
                slot_of.insert(s, slot);
            }
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for r in stalled {
            for dir in r.node_dirs() {
                let children = match children_left(&self.observer, &dir) {
                    Ok(c) => c,
                    Err(e) => {
                        row.notes
                            .push(format!("stalled {dir}: cannot list it: {e}"));
                        continue;
                    }
                };
                let mut nodes: Vec<(i64, String)> = Vec::new();
                for c in children {
                    let path = format!("{dir}/{c}");
                    let line = match self.observer.exists(&path) {
                        Ok(Some(stat)) => {
                            let owner = stat.ephemeral_owner;
                            let slot = slot_of
                                .get(&owner)
                                .map_or("no slot's current session", String::as_str);
                            let member = self
                                .member_serving(owner)
                                .map_or("none".to_owned(), |m| m.to_string());
                            nodes.push((
                                stat.czxid,
                                format!(
                                    "{c} (czxid 0x{:x}, created {:.1} s ago) of session 0x{:x}: \
                                     {slot}, on member {member}",
                                    stat.czxid,
                                    (now_ms - stat.ctime) as f64 / 1000.0,
                                    owner as u64
                                ),
                            ));
                            continue;
                        }
                        Ok(None) => format!("{c}: gone while looked at"),
                        Err(e) => format!("{c}: cannot look it up: {e}"),
                    };
                    nodes.push((i64::MAX, line));
                }
                nodes.sort();
                row.notes.push(format!(
                    "stalled {dir}: {} nodes{}",
                    nodes.len(),
                    nodes
                        .iter()
                        .map(|(_, l)| format!("; {l}"))
                        .collect::<String>()
                ));
            }
            let log = r.register.log();
            let last: Vec<String> = log[log.len().saturating_sub(LAST_EVENTS)..]
                .iter()
                .map(|e| {
                    format!(
                        "{:?} {} #{} {:.1} s ago",
                        e.kind,
                        e.worker,
                        e.token,
                        r.at(e).elapsed().as_secs_f64()
                    )
                })
                .collect();
            row.notes.push(format!(
                "stalled {} register: inside {:?}; last events: {}",
                r.path,
                r.inside(),
                last.join(", ")
            ));
        }
        // Every zklock slot's own account.
        let zklock: Vec<usize> = (0..workers.len())
            .filter(|&i| !workers[i].is_java() && !workers[i].is_kazoo() && !workers[i].killed)
            .collect();
        let before: Vec<usize> = zklock.iter().map(|&i| workers[i].events.len()).collect();
        for &i in &zklock {
            workers[i].send("dump");
        }
        let end = Instant::now() + Duration::from_secs(5);
        let answered = |w: &mut WorkerProc, from: usize| {
            let slots = w.count("ready");
            w.events[from..]
                .iter()
                .filter(|e| e.starts_with("state "))
                .count()
                >= slots
        };
        while Instant::now() < end
            && !zklock
                .iter()
                .zip(&before)
                .all(|(&i, &from)| answered(&mut workers[i], from))
        {
            thread::sleep(Duration::from_millis(50));
        }
        for (&i, &from) in zklock.iter().zip(&before) {
            let w = &mut workers[i];
            w.pump();
            let states: Vec<String> = w.events[from..]
                .iter()
                .filter_map(|e| e.strip_prefix("state "))
                .map(str::to_owned)
                .collect();
            if states.is_empty() {
                row.notes
                    .push(format!("worker {} did not answer `dump`", w.name));
            }
            for s in states {
                row.notes.push(format!("slot {s}"));
            }
        }
    }
}
