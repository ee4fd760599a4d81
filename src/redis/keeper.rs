//! The keeper: one thread per Client (`zklock-redis-keeper`) that renews every hold of the
//! Client in one pipeline at a third of the hold TTL, keeps each hold's local lease, reports
//! each hold's health as it changes, and finishes the releases that could not be done in the
//! caller's time (a guard's drop, a release whose bound ran out). A recipe without a thread of
//! its own runs its steps here through the [`Tick`] hook (a leader latch keeps its place in its
//! queue that way); the keeper knows no recipe.
//!
//! A hold's lease counts from the *send* time of its last acknowledged renewal (or of the grant):
//! the key's TTL restarted no earlier than that, so the lease runs out no later than the key —
//! as long as the server's wall clock, on which Redis keeps every expiry, does not step. Each
//! round also reads the server's `TIME`; a step found there (see [`super::clock`]) is logged,
//! and the holds read `Suspended` until the clocks have agreed for a renewal period again (a
//! hold whose key the step expired reads `Lost`, as the renewal finds it gone). Through
//! Sentinel each round also asks the sentinels which node is the primary, and renews again at
//! once on a new one (the old may go on answering as a primary for a while).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::scripts::{Keys, Scripts};
use super::server::{route, Route, Server};
use super::wake::{Registered, Wakes};
use crate::core::connection::States;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::server_clock::ServerClock;

mod clock_check;
mod owed;
mod renewal;

/// What a hold's health is reported through.
pub(crate) type Report = Arc<dyn Fn(LockHealth) + Send + Sync>;

/// One hold the keeper renews.
struct Kept {
    keys: Keys,
    owner: String,
    lease: Arc<LocalLease>,
    report: Report,
    /// The server's clock stepped since the hold's last renewal: it reads `Suspended` until a
    /// renewal finds the clocks in step again.
    doubted: bool,
}

/// A hold in a renewal round: its id, keys, owner, lease and report.
type Renewing = (u64, Keys, String, Arc<LocalLease>, Report);

/// A release (or a waiter's leave) still owed to the server.
struct Owed {
    keys: Keys,
    owner: String,
    give_up: Instant,
    /// Leave the queue rather than release a hold.
    leave: bool,
}

/// Work the keeper does on its thread at every tick, for a recipe that has no thread of its
/// own: a leader latch keeps its place in its queue, and its term's hold, this way.
pub(crate) trait Tick: Send {
    /// One step; `false` once it takes no more part.
    fn tick(&mut self, k: &mut Keeping<'_>) -> bool;
    /// The Client closes: let go of what it holds or queued (through [`Keeping::owe`], paid in
    /// the keeper's last round).
    fn finish(&mut self, k: &mut Keeping<'_>);
}

#[derive(Default)]
struct Shared {
    holds: Mutex<HashMap<u64, Kept>>,
    owed: Mutex<Vec<Owed>>,
    /// The queue entries of this Client's waiters now parked (waiter id → its lock's keys):
    /// what a close takes out of the queues.
    queued: Mutex<HashMap<String, Keys>>,
    /// When a close gives up on what it still owes (set by the close).
    give_up: Mutex<Option<Instant>>,
    /// The wake-up channels a close publishes on, so that the threads reading them see the
    /// close at once (set by the close).
    closing_wakes: Mutex<Vec<String>>,
    /// Ticks started since the keeper last looked.
    arriving: Mutex<Vec<Box<dyn Tick>>>,
    next: AtomicU64,
    signalled: Mutex<bool>,
    signal: Condvar,
}

/// The keeper's handle, kept by the Client.
pub(crate) struct Keeper {
    shared: Arc<Shared>,
    ttl: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Keeper {
    pub(crate) fn start(
        server: Server,
        scripts: Arc<Scripts>,
        ttl: Duration,
        operation_timeout: Duration,
        closed: Arc<AtomicBool>,
        (wakes, client_id, states, shown): (Arc<Wakes>, String, Arc<States>, String),
        replicas: Option<Replicas>,
    ) -> Result<Keeper> {
        let shared = Arc::new(Shared::default());
        let run = Run {
            shared: shared.clone(),
            server,
            scripts,
            ttl,
            operation_timeout,
            closed,
            conns: HashMap::new(),
            wakes,
            client_id,
            states,
            ticking: Vec::new(),
            next_owner: 0,
            clocks: HashMap::new(),
            shown,
            replicas,
            conn_moves: 0,
        };
        let thread = std::thread::Builder::new()
            .name("zklock-redis-keeper".into())
            .spawn(move || run.run())
            .map_err(|e| Error::thread_start("zklock-redis-keeper", &e))?;
        Ok(Keeper {
            shared,
            ttl,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A new hold's lease, opened at `sent` (when the granting call was sent).
    pub(crate) fn lease(&self, sent: Duration) -> Arc<LocalLease> {
        open_lease(self.ttl, sent)
    }

    /// Runs `tick` at every tick of the keeper's thread until it says it is done, and its
    /// `finish` when the Client closes.
    pub(crate) fn tick_with(&self, tick: Box<dyn Tick>) {
        self.shared.arriving.lock().push(tick);
        self.shared.wake();
    }

    /// Renews a hold from now on, until [`forget`](Self::forget).
    pub(crate) fn keep(
        &self,
        keys: &Keys,
        owner: &str,
        lease: Arc<LocalLease>,
        report: Report,
    ) -> u64 {
        self.shared.keep(keys, owner, lease, report)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.shared.holds.lock().remove(&id);
    }

    /// Releases a hold in the background, retrying until it is done or its key has expired
    /// by itself (a TTL from now). `false` once the Client is closing: the keeper may have
    /// paid its last debts already, and the caller should release it itself.
    pub(crate) fn release_later(&self, keys: &Keys, owner: &str) -> bool {
        self.shared
            .owe(keys, owner, Instant::now() + self.ttl, false);
        self.shared.wake();
        self.shared.give_up.lock().is_none()
    }

    /// Takes a waiter out of its queue in the background, retrying until it is done or its
    /// entry has expired by itself (a TTL from now).
    pub(crate) fn leave_later(&self, keys: &Keys, owner: &str) {
        self.shared.queued.lock().remove(owner);
        self.shared
            .owe(keys, owner, Instant::now() + self.ttl, true);
        self.shared.wake();
    }

    /// A waiter has an entry in the queue of the lock with `keys`: a close takes it out.
    pub(crate) fn queued(&self, keys: &Keys, owner: &str) {
        self.shared
            .queued
            .lock()
            .insert(owner.to_owned(), keys.clone());
    }

    /// The waiter's entry is gone (granted, or it left), or is the caller's to remove.
    pub(crate) fn unqueued(&self, owner: &str) {
        self.shared.queued.lock().remove(owner);
    }

    /// The Client is about to close (called before its close flag is set, so that a release
    /// handed over after the keeper's last round is seen by its caller as not taken): the
    /// keeper will give up at `give_up`, and publish an empty message on the wake-up channels
    /// of `wake` (`CLIENT` or `CLIENT/N`) in its last round trip.
    pub(crate) fn closing(&self, give_up: Instant, wake: Vec<String>) {
        {
            let mut at = self.shared.give_up.lock();
            *at = Some(at.map_or(give_up, |earlier| earlier.min(give_up)));
        }
        self.shared.closing_wakes.lock().extend(wake);
    }

    /// Tells the thread to finish — release what the Client holds, take its waiters out of
    /// their queues, pay what it owes, giving up at `give_up` — and waits for it until then
    /// (the thread's last call may need until `give_up` too).
    pub(crate) fn stop(&self, give_up: Instant) {
        self.shared.wake();
        if let Some(t) = self.thread.lock().take() {
            join_by(t, give_up + Duration::from_millis(50));
        }
    }

    /// Wakes the thread (a latch closed).
    pub(crate) fn wake(&self) {
        self.shared.wake();
    }
}

impl Shared {
    fn keep(&self, keys: &Keys, owner: &str, lease: Arc<LocalLease>, report: Report) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.holds.lock().insert(
            id,
            Kept {
                keys: keys.clone(),
                owner: owner.to_owned(),
                lease,
                report,
                doubted: false,
            },
        );
        id
    }

    fn owe(&self, keys: &Keys, owner: &str, give_up: Instant, leave: bool) {
        self.owed.lock().push(Owed {
            keys: keys.clone(),
            owner: owner.to_owned(),
            give_up,
            leave,
        });
    }

    fn wake(&self) {
        *self.signalled.lock() = true;
        self.signal.notify_all();
    }

    fn wait(&self, until: Instant) {
        let mut s = self.signalled.lock();
        if !*s {
            let _ = self.signal.wait_until(&mut s, until);
        }
        *s = false;
    }
}

struct Run {
    shared: Arc<Shared>,
    server: Server,
    scripts: Arc<Scripts>,
    ttl: Duration,
    operation_timeout: Duration,
    closed: Arc<AtomicBool>,
    /// The keeper's connections, by node (`""` for one server or the sentinels' primary; on a
    /// cluster each primary's `host:port`, and [`super::server::ANY`] for calls of no lock).
    conns: HashMap<String, redis::Connection>,
    wakes: Arc<Wakes>,
    client_id: String,
    states: Arc<States>,
    ticking: Vec<Box<dyn Tick>>,
    next_owner: u64,
    /// The server's clock as the keeper's rounds read it, by node.
    clocks: HashMap<String, ServerClock>,
    /// The server's URL without its password, for the log.
    shown: String,
    /// Replicated grants: each renewal batch counts only once this many replicas have it.
    replicas: Option<Replicas>,
    /// The server's primary moves when the connections were opened.
    conn_moves: u64,
}

impl Run {
    fn run(mut self) {
        let period = self.ttl / 3;
        let tick = (self.ttl / 20).clamp(Duration::from_millis(5), Duration::from_millis(500));
        let mut next_renewal = Instant::now() + period;
        while !self.closed.load(Ordering::Acquire) {
            self.shared.wait(Instant::now() + tick);
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            self.pay_owed(None);
            if Instant::now() >= next_renewal {
                next_renewal = Instant::now() + period;
                // Through Sentinel, a server that answered may no longer be the primary the
                // sentinels name (one that does not answer is left at once, the next
                // connection asking them), asked within what is left of the round's bound:
                // renew at once on the new one, so that a hold its key lacks reads Lost now,
                // and a step between the two primaries' clocks is found now.
                let began = Instant::now();
                if self.renew() {
                    let left = self.timeout().saturating_sub(began.elapsed());
                    if left >= Duration::from_millis(1) && self.server.primary_moved(left) {
                        self.renew();
                    }
                }
            }
            self.report();
            self.states.judge();
            self.tick_all();
        }
        self.finish();
    }

    /// How long the keeper's calls wait: at most a sixth of the TTL (or the operation timeout
    /// if shorter), so that a silent server delays the health the keeper reports by no more
    /// than that.
    fn timeout(&self) -> Duration {
        self.operation_timeout
            .min(self.ttl / 6)
            .max(Duration::from_millis(10))
    }

    /// The keeper's connection for `route`, opened when missing; with `by`, opened and
    /// answering by then. With the node it goes to.
    fn conn_by(
        &mut self,
        route: Route,
        by: Option<Instant>,
    ) -> Option<(String, &mut redis::Connection)> {
        let timeout = self.timeout();
        let moves = self.server.moves();
        if self.conn_moves != moves {
            // Opened before the primary moved: to a node that is no longer it.
            self.conns.clear();
            self.conn_moves = moves;
        }
        let node = match self.server.known_node(route) {
            Some(node) if self.conns.contains_key(&node) => {
                if let Some(by) = by {
                    let left = by.saturating_duration_since(Instant::now()).min(timeout);
                    let conn = self.conns.get(&node)?;
                    if left.is_zero()
                        || conn.set_read_timeout(Some(left)).is_err()
                        || conn.set_write_timeout(Some(left)).is_err()
                    {
                        return None;
                    }
                }
                node
            }
            _ => {
                let within = match by {
                    Some(by) => by.saturating_duration_since(Instant::now()).min(timeout),
                    None => timeout,
                };
                if within.is_zero() {
                    return None;
                }
                match self.server.connect_route(route, within, within) {
                    Ok((node, c)) => {
                        self.conns.insert(node.clone(), c);
                        node
                    }
                    Err(e) => {
                        tracing::debug!("zklock: Redis keeper cannot connect: {e}");
                        return None;
                    }
                }
            }
        };
        self.conns.get_mut(&node).map(|c| (node, c))
    }

    fn conn(&mut self, route: Route) -> Option<&mut redis::Connection> {
        self.conn_by(route, None).map(|(_, c)| c)
    }

    /// Sends `pipe` (script calls of `scripts`) on the keeper's connection for `route`,
    /// loading the scripts and sending it again if the server forgot them (a restart, `SCRIPT
    /// FLUSH`). `sent` is set to the lease clock's reading when the answered pipeline was
    /// sent; the node that answered is returned with the answer. A connection found broken
    /// is dropped; on a cluster, a redirect or a failed connection marks the slot map stale.
    ///
    /// `at` names the cluster node to send it to instead (an `ASK` answer's).
    fn query<T: redis::FromRedisValue>(
        &mut self,
        (route, at): (Route, Option<&str>),
        pipe: &redis::Pipeline,
        scripts: &[&redis::Script],
        by: Option<Instant>,
        sent: &mut Duration,
    ) -> (String, redis::RedisResult<T>) {
        let timeout = self.timeout();
        let conn = match at {
            Some(node) => self.conn_at(node, by),
            None => self.conn_by(route, by),
        };
        let Some((node, conn)) = conn else {
            if let Some(cluster) = self.server.as_cluster() {
                cluster.suspect();
            }
            let e = redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the keeper cannot connect",
            ));
            return (String::new(), Err(e));
        };
        let until = |by: Option<Instant>| {
            let until = Instant::now() + timeout;
            by.map_or(until, |by| by.min(until))
        };
        *sent = boot_clock();
        let answers = match pipe.query(&mut Until::new(conn, until(by))) {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                for script in scripts {
                    let _ = script.prepare_invoke().load(conn);
                }
                *sent = boot_clock();
                pipe.query(&mut Until::new(conn, until(by)))
            }
            other => other,
        };
        if answers.is_ok() && by.is_none() {
            // Back to the keeper's bound for the next pipeline on this connection.
            let _ = conn.set_read_timeout(Some(timeout));
        }
        if let Err(e) = &answers {
            if super::error::broken(e) {
                self.conns.remove(&node);
            }
            if let Some(cluster) = self.server.as_cluster() {
                cluster.redirected(e, &node);
            }
        }
        (node, answers)
    }

    /// The keeper's connection to the cluster node `node`, opened when missing; with `by`,
    /// opened and answering by then.
    fn conn_at(
        &mut self,
        node: &str,
        by: Option<Instant>,
    ) -> Option<(String, &mut redis::Connection)> {
        let mut timeout = self.timeout();
        if let Some(by) = by {
            timeout = timeout.min(by.saturating_duration_since(Instant::now()));
            if timeout.is_zero() {
                return None;
            }
            if let Some(conn) = self.conns.get(node) {
                if conn.set_read_timeout(Some(timeout)).is_err()
                    || conn.set_write_timeout(Some(timeout)).is_err()
                {
                    return None;
                }
            }
        }
        if !self.conns.contains_key(node) {
            match self.server.connect_node(node, timeout, timeout) {
                Ok(c) => {
                    self.conns.insert(node.to_owned(), c);
                }
                Err(e) => {
                    tracing::debug!("zklock: Redis keeper cannot connect to {node}: {e}");
                    return None;
                }
            }
        }
        self.conns.get_mut(node).map(|c| (node.to_owned(), c))
    }

    /// On a cluster whose map is stale, reads it (within the keeper's bound, and by `by`),
    /// so that what follows is grouped by the primaries of the new one.
    fn fresh_map(&self, by: Option<Instant>) {
        if let Some(cluster) = self.server.as_cluster() {
            let mut timeout = self.timeout();
            if let Some(by) = by {
                timeout = timeout.min(by.saturating_duration_since(Instant::now()));
                if timeout.is_zero() {
                    return;
                }
            }
            if let Err(e) = cluster.read_map(timeout, timeout) {
                tracing::debug!("zklock: the Redis Cluster map was not read: {e}");
            }
        }
    }

    /// `items` grouped by the node their lock's route goes to now (one group on one server).
    fn group<T>(&self, items: Vec<T>, keys: impl Fn(&T) -> &Keys) -> Vec<(Route, Vec<T>)> {
        let mut groups: Vec<(String, Route, Vec<T>)> = Vec::new();
        for item in items {
            let route = route(keys(&item));
            let node = self
                .server
                .known_node(route)
                .unwrap_or_else(|| format!("slot {route:?}"));
            match groups.iter_mut().find(|(n, _, _)| *n == node) {
                Some((_, _, group)) => group.push(item),
                None => groups.push((node, route, vec![item])),
            }
        }
        groups.into_iter().map(|(_, r, g)| (r, g)).collect()
    }

    /// Reports each hold's health as its lease reads now (`Suspended` at best while the
    /// server's clock is in doubt).
    fn report(&self) {
        let holds: Vec<(Arc<LocalLease>, Report, bool)> = self
            .shared
            .holds
            .lock()
            .values()
            .map(|k| (k.lease.clone(), k.report.clone(), k.doubted))
            .collect();
        for (lease, report, doubted) in holds {
            let floor = if doubted {
                LockHealth::Suspended
            } else {
                LockHealth::Held
            };
            report(worst(lease.health(), floor));
        }
    }

    /// Every [`Tick`]'s step.
    fn tick_all(&mut self) {
        self.ticks_arrive();
        let mut ticking = std::mem::take(&mut self.ticking);
        ticking.retain_mut(|t| t.tick(&mut Keeping { run: self }));
        self.ticking = ticking;
    }

    fn ticks_arrive(&mut self) {
        let arriving = std::mem::take(&mut *self.shared.arriving.lock());
        self.ticking.extend(arriving);
    }
}

/// A keeper's connection whose pipelines end by `until`: the `redis` crate's own waits its read
/// timeout for each answer of a pipeline, so against a frozen server a pipeline of n commands
/// would wait n timeouts.
struct Until<'a> {
    conn: &'a mut redis::Connection,
    until: Instant,
}

impl<'a> Until<'a> {
    fn new(conn: &'a mut redis::Connection, until: Instant) -> Until<'a> {
        Until { conn, until }
    }

    fn left(&self) -> redis::RedisResult<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        match left.is_zero() {
            true => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no time left for the answer",
            ))),
            false => Ok(left),
        }
    }
}

impl redis::ConnectionLike for Until<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.conn.set_read_timeout(Some(self.left()?))?;
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.conn.set_write_timeout(Some(self.left()?))?;
        self.conn.send_packed_command(cmd)?;
        let mut answers = Vec::with_capacity(count);
        for i in 0..offset + count {
            self.conn.set_read_timeout(Some(self.left()?))?;
            let answer = self.conn.recv_response()?;
            if i >= offset {
                answers.push(answer);
            }
        }
        Ok(answers)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// `EVALSHA` of `script` with the lock's keys and `args`, for a pipeline.
fn evalsha(script: &redis::Script, keys: &Keys, args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.all().len());
    for key in keys.all() {
        cmd.arg(key);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// A hold's local lease, opened at `sent` (when the granting call was sent).
fn open_lease(ttl: Duration, sent: Duration) -> Arc<LocalLease> {
    let lease = LocalLease::new();
    lease.open_at(ttl, ttl / 2, sent);
    Arc::new(lease)
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a [`Tick`] may use of the keeper while it runs on the keeper's thread.
pub(crate) struct Keeping<'a> {
    run: &'a mut Run,
}

impl Keeping<'_> {
    /// The Client's hold TTL.
    pub(crate) fn ttl(&self) -> Duration {
        self.run.ttl
    }

    /// Replicated grants, if the Client asks for them.
    pub(crate) fn replicas(&self) -> Option<Replicas> {
        self.run.replicas
    }

    /// The Client's scripts.
    pub(crate) fn scripts(&self) -> Arc<Scripts> {
        self.run.scripts.clone()
    }

    /// The keeper's connection for the lock with `keys`, opened when missing; `None` while
    /// the server (on a cluster, the primary of the lock's slot) cannot be reached.
    pub(crate) fn conn(&mut self, keys: &Keys) -> Option<&mut redis::Connection> {
        self.run.conn(route(keys))
    }

    /// On a cluster, what an error of a call for the lock with `keys` says of the slot map: a
    /// `MOVED` names the node the slot is served by (the next attempt goes there), an `ASK`
    /// nothing lasting, anything else makes the map be read again.
    pub(crate) fn redirected(&mut self, keys: &Keys, e: &redis::RedisError) {
        if let Some(cluster) = self.run.server.as_cluster() {
            let from = route(keys).and_then(|slot| cluster.serving(slot));
            cluster.redirected(e, from.as_deref().unwrap_or_default());
        }
    }

    /// Drops the keeper's connection for the lock with `keys` (found broken);
    /// the next call opens another.
    pub(crate) fn drop_conn(&mut self, keys: &Keys) {
        let route = route(keys);
        if let Some(node) = self.run.server.known_node(route) {
            self.run.conns.remove(&node);
        }
        if let Some(cluster) = self.run.server.as_cluster() {
            cluster.suspect();
        }
    }

    /// A new owner id of this Client for `what` (`latch` → `CLIENT:latchN`), registered for
    /// its wake-up message, which wakes the keeper.
    pub(crate) fn new_owner(&mut self, what: &str) -> (String, Registered) {
        self.run.next_owner += 1;
        let owner = format!("{}:{what}{}", self.run.client_id, self.run.next_owner);
        let shared = self.run.shared.clone();
        let hook = Arc::new(move || shared.wake());
        let registered = self.run.wakes.register_with(&owner, Some(hook));
        (owner, registered)
    }

    /// Renews a hold from now on, until [`forget`](Self::forget): as [`Keeper::keep`].
    pub(crate) fn keep(
        &mut self,
        keys: &Keys,
        owner: &str,
        lease: Arc<LocalLease>,
        report: Report,
    ) -> u64 {
        self.run.shared.keep(keys, owner, lease, report)
    }

    /// A new hold's lease, opened at `sent` (when the granting call was sent).
    pub(crate) fn lease(&self, sent: Duration) -> Arc<LocalLease> {
        open_lease(self.run.ttl, sent)
    }

    /// Stops renewing a hold.
    pub(crate) fn forget(&mut self, id: u64) {
        self.run.shared.holds.lock().remove(&id);
    }

    /// A release (`leave`: a queue exit) the keeper pays in the background, retrying until
    /// done or a TTL from now — or, once the Client closes, by the close's give-up time.
    pub(crate) fn owe(&mut self, keys: &Keys, owner: &str, leave: bool) {
        let give_up =
            (*self.run.shared.give_up.lock()).unwrap_or_else(|| Instant::now() + self.run.ttl);
        self.run.shared.owe(keys, owner, give_up, leave);
    }
}

/// Replicated grants: `WAIT count timeout` after each grant and with each renewal batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

impl Replicas {
    /// The `WAIT` command.
    pub(crate) fn wait(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.count).arg(ms(self.timeout).max(1));
        cmd
    }
}

/// Joins `thread` if it ends by `until`; lets it end by itself otherwise (or if it is the
/// calling thread: a callback dropped the last handle of its Client).
pub(crate) fn join_by(thread: JoinHandle<()>, until: Instant) {
    if thread.thread().id() == std::thread::current().id() {
        return;
    }
    while !thread.is_finished() {
        if Instant::now() >= until {
            tracing::debug!(
                "zklock: Redis thread {:?} still busy at close: it ends by itself",
                thread.thread().name()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = thread.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_holds_lease_counts_from_the_grants_send_time() {
        let sent = boot_clock().saturating_sub(Duration::from_secs(2));
        let lease = open_lease(Duration::from_secs(3), sent);
        let since = lease.since_heard().unwrap();
        assert!(
            since >= Duration::from_secs(2),
            "counted from {since:?} ago"
        );
        assert_eq!(lease.health(), LockHealth::Suspended);
    }
}
