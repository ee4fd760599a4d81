//! The session supervisor: a task on the I/O thread that opens sessions, turns the
//! wire client's states into Curator's connection states (with the local `Lost`), and opens a new
//! session after expiry. It is the only writer of the connection state, so states are ordered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future;
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::parents::mkdirs;
use super::runtime::{sleep, Signal};
use super::shared::Shared;
use super::types::ConnectionState;
use crate::core::error::{Error, Result};

enum End {
    Stop,
    SessionOver,
    /// The session now lives on this wire client, connected to these hosts: every host the old
    /// one knew was out of reach, and the current member list named others.
    Moved(zk::Client, String),
}

/// How long the wire client may try its own hosts before the session is moved to members it
/// does not know (the wire client's own connection timeout is a third of the session timeout).
fn move_grace(shared: &Shared) -> Duration {
    let b = &shared.config;
    (b.session_timeout / 4).min(b.connection_timeout)
}

/// How often a disconnected session looks at the member list.
const MOVE_POLL: Duration = Duration::from_millis(250);

/// The supervisor task: runs until the Client closes.
pub(crate) async fn supervise(shared: Arc<Shared>) {
    let mut had_session = false;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    while !shared.stop.is_set() {
        let opened = future::or(async { Some(open_session(&shared).await) }, async {
            shared.stop.wait().await;
            None
        })
        .await;
        let (mut zk, mut wire_hosts) = match opened {
            None => break,
            Some(Ok(opened)) => opened,
            Some(Err(err)) => {
                tracing::warn!("cannot open a ZooKeeper session: {err}");
                *shared.last_open_error.lock() = Some(err);
                future::or(sleep(backoff.next_pause()), shared.stop.wait()).await;
                continue;
            }
        };
        backoff.reset();
        let state = if had_session {
            ConnectionState::Reconnected
        } else {
            ConnectionState::Connected
        };
        had_session = true;
        let ended = Signal::default();
        let mut moved = Signal::default();
        shared.set(state, |c| {
            c.zk = Some(zk.clone());
            c.generation += 1;
            c.ended = ended.clone();
            c.moved = moved.clone();
        });
        let end = follow_session(&shared, &mut zk, &mut wire_hosts, &mut moved).await;
        {
            let mut conn = shared.conn.lock();
            conn.zk = None;
            conn.connected = false;
        }
        ended.set();
        if let End::Stop = end {
            close_session(zk).await;
            break;
        }
        // An abandoned session's task ends by itself: it closes the session if it reconnects.
        drop(zk);
    }
    shared.finished.set();
}

/// Follows the session on `zk` until it ends or the Client stops, through every move of the
/// session to another wire client (`zk`, `wire_hosts` and `moved` are then the new one's),
/// with the ensemble tracker running beside each wire client.
async fn follow_session(
    shared: &Arc<Shared>,
    zk: &mut zk::Client,
    wire_hosts: &mut String,
    moved: &mut Signal,
) -> End {
    loop {
        let retired = Signal::default();
        if shared.tracks_ensemble() {
            let (shared, zk, retired) = (shared.clone(), zk.clone(), retired.clone());
            shared.clone().spawn(async move {
                super::ensemble::track(&shared, zk, retired).await;
            });
        }
        let end = monitor(shared, zk, wire_hosts).await;
        retired.set();
        let End::Moved(next, hosts) = end else {
            return end;
        };
        // The same session on another wire client: ops, followers and watches go over to it
        // (every blocked call is woken by the state and looks again).
        tracing::info!(
            "ZooKeeper session 0x{:x} moved to {hosts}",
            zk.session().id().0
        );
        let old = std::mem::replace(zk, next);
        *wire_hosts = hosts;
        let old_moved = std::mem::take(moved);
        shared.set(ConnectionState::Reconnected, |c| {
            c.zk = Some(zk.clone());
            c.moved = moved.clone();
        });
        old_moved.set();
        retire(shared, old);
    }
}

/// The wire client's connector for this Client's sessions.
fn connector(shared: &Shared) -> zk::Connector {
    let b = &shared.config;
    // The wire client calls the connection lost when nothing was received for this long, even
    // while it keeps sending (a frozen server is noticed): a third of the session timeout.
    #[allow(unused_mut)] // changed only with `sasl-digest-md5`
    let mut connector = zk::Client::connector()
        .with_session_timeout(b.session_timeout)
        .with_connection_timeout(b.session_timeout / 3)
        .with_readonly(b.can_be_read_only);
    #[cfg(feature = "sasl-digest-md5")]
    if let Some((user, password)) = &b.sasl {
        connector =
            connector.with_sasl(zk::SaslOptions::digest_md5(user.clone(), password.clone()));
    }
    let added = shared.added_auth.lock().clone();
    for (scheme, auth) in b.auth.iter().chain(&added) {
        connector = connector.with_auth(scheme, auth);
    }
    connector
}

/// Connects `connector` to `hosts`, with TLS if the Client uses it.
async fn connect(shared: &Shared, connector: zk::Connector, hosts: &str) -> Result<zk::Client> {
    // The wire client's own words (refused, unresolvable, timed out) are the cause a caller of
    // `connect()` needs; mapping them to a bare ConnectionLoss would lose them.
    let connecting = match &shared.config.tls {
        #[cfg(feature = "tls")]
        Some(tls) => {
            connector
                .with_tls(tls.options.clone())
                .secure_connect(hosts)
                .await
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match *never {},
        None => connector.connect(hosts).await,
    };
    connecting.map_err(|e| match Error::from_zk(e.clone(), hosts) {
        Error::ConnectionLoss | Error::ZooKeeper(_) => Error::ZooKeeper(e.to_string()),
        mapped => mapped,
    })
}

/// `zk` taken into the Client's namespace, if it has one.
fn chroot(shared: &Shared, zk: zk::Client) -> Result<zk::Client> {
    match &shared.config.namespace {
        None => Ok(zk),
        Some(ns) => zk.chroot(ns.as_str()).map_err(|_| Error::InvalidPath {
            path: ns.clone(),
            reason: "not a valid namespace",
        }),
    }
}

/// A new session on the current member list; also returns that list.
async fn open_session(shared: &Shared) -> Result<(zk::Client, String)> {
    let hosts = shared.hosts.lock().clone();
    let zk = connect(shared, connector(shared), &hosts).await?;
    if let Some(ns) = &shared.config.namespace {
        let acls = &shared.config.namespace_acls;
        let acl = |p: &str| {
            acls.iter()
                .find(|(q, _)| q == p)
                .map(|(_, a)| a.clone())
                .unwrap_or_default()
        };
        mkdirs(&zk, ns, zk::CreateMode::Persistent, &acl).await?;
    }
    Ok((chroot(shared, zk)?, hosts))
}

/// The session `session` resumed on one of `candidates`, all given to one wire client (it
/// goes through them in turn until one takes the session), for at most the connection timeout;
/// `None` if none takes it. Returns the wire client and the full member list it is to know.
///
/// The candidates can name members that are leaving too: the list may predate the last change
/// of the configuration (the tracker reads it through the session being moved), so a member
/// that does not answer must not hold the others up.
async fn move_session(
    shared: &Shared,
    session: zk::SessionInfo,
    candidates: Vec<String>,
    members: String,
) -> Option<(zk::Client, String)> {
    let bound = shared.config.connection_timeout;
    let hosts = candidates.join(",");
    let connector = connector(shared).with_session(session);
    let attempt = future::or(
        async { Some(connect(shared, connector, &hosts).await) },
        async {
            sleep(bound).await;
            None
        },
    );
    match attempt.await {
        Some(Ok(zk)) => match chroot(shared, zk) {
            Ok(zk) => return Some((zk, members)),
            Err(e) => tracing::warn!("cannot move the session to {hosts}: {e}"),
        },
        Some(Err(e)) => tracing::info!("cannot move the session to {hosts}: {e}"),
        None => tracing::info!("cannot move the session to {hosts}: no answer"),
    }
    None
}

/// Lets go of a wire client whose session moved on. Its task may still be trying its old hosts;
/// a handle is kept until it gives up (its own session deadline) or the Client closes, because
/// the wire client closes its session when it reconnects with no handle left.
fn retire(shared: &Arc<Shared>, old: zk::Client) {
    let stop = shared.stop.clone();
    shared.spawn(async move {
        let mut states = old.state_watcher();
        let over = async {
            while !states.state().is_terminated() {
                states.changed().await;
            }
        };
        future::or(over, stop.wait()).await;
        drop(old);
    });
}

/// Follows one session until it ends (expired, or locally lost) or the Client stops, and keeps
/// the local lease on it (see `core/lease.rs`).
///
/// While every host the wire client knows (`wire_hosts`) is out of reach for a while and the
/// member list names others, it tries to move the session to those ([`End::Moved`]).
async fn monitor(shared: &Shared, zk: &zk::Client, wire_hosts: &str) -> End {
    let mut session = Monitor::new(shared, zk, wire_hosts);
    loop {
        let ev = session.next_event().await;
        if let Some(end) = session.handle(ev) {
            return end;
        }
    }
}

/// What wakes the [`Monitor`].
enum Ev {
    /// The wire client's state changed.
    State(zk::SessionState),
    /// A whole session timeout went by without an answer.
    LostTimer,
    /// The heartbeat of the local lease.
    Beat,
    /// The round trip sent after a stall came back (or failed).
    Vouched(bool),
    /// The Client is closing.
    Stop,
    /// Time to look at the member list for hosts the wire client does not know.
    LookForMembers,
    /// An attempt to move the session ended: the new wire client, or `None`.
    Moved(Option<(zk::Client, String)>),
    /// The round trip sent through a reconnection came back (or failed), with that state.
    Confirmed(bool, zk::SessionState),
}

/// A round trip in flight, answering whether it went through.
type RoundTrip = future::Boxed<bool>;

/// An attempt to move the session (see [`move_session`]).
type Moving<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<(zk::Client, String)>> + Send + 'a>>;

/// The state [`monitor`] keeps on one session.
struct Monitor<'a> {
    shared: &'a Shared,
    zk: &'a zk::Client,
    wire_hosts: &'a str,
    /// The session timeout the server granted.
    negotiated: Duration,
    /// The wire client's idle timeout (see [`idle_timeout`]).
    idle: Duration,
    /// The lease's heartbeat period, and how late a beat may come before the process counts
    /// as having stood still.
    period: Duration,
    late: Duration,
    watcher: zk::StateWatcher,
    /// When the session is given up unless the connection comes back first.
    lost_at: Option<Instant>,
    last_beat: Instant,
    /// Whether a connected state seen on time renews the lease; after a stall only a round
    /// trip sent since does.
    trusted: bool,
    vouching: Option<RoundTrip>,
    /// A reconnection is believed once a round trip went through it (see
    /// [`on_connected`](Monitor::on_connected)).
    confirming: Option<(RoundTrip, zk::SessionState)>,
    disconnected_at: Option<Instant>,
    moving: Option<Moving<'a>>,
}

impl<'a> Monitor<'a> {
    fn new(shared: &'a Shared, zk: &'a zk::Client, wire_hosts: &'a str) -> Monitor<'a> {
        let negotiated = zk.session_timeout();
        let idle = idle_timeout(shared.config.session_timeout / 3, negotiated);
        shared.lease.open(negotiated, idle);
        let (period, late) = shared.lease.beat();
        Monitor {
            shared,
            zk,
            wire_hosts,
            negotiated,
            idle,
            period,
            late,
            watcher: zk.state_watcher(),
            lost_at: None,
            last_beat: Instant::now(),
            trusted: true,
            vouching: None,
            confirming: None,
            disconnected_at: None,
            moving: None,
        }
    }

    /// Waits for whatever comes first.
    async fn next_event(&mut self) -> Ev {
        let lost_at = self.lost_at;
        let timer = async {
            match lost_at {
                Some(at) => async_io::Timer::at(at).await,
                None => async_io::Timer::never().await,
            };
            Ev::LostTimer
        };
        let next_beat = self.last_beat + self.period;
        let beat = async {
            async_io::Timer::at(next_beat).await;
            Ev::Beat
        };
        let vouching = &mut self.vouching;
        let vouched = async {
            match vouching.as_mut() {
                Some(round_trip) => Ev::Vouched(round_trip.await),
                None => future::pending().await,
            }
        };
        let confirming = &mut self.confirming;
        let confirmed = async {
            match confirming.as_mut() {
                Some((round_trip, state)) => Ev::Confirmed(round_trip.await, *state),
                None => future::pending().await,
            }
        };
        let watcher = &mut self.watcher;
        let changed = async { Ev::State(watcher.changed().await) };
        let shared = self.shared;
        let stop = async {
            shared.stop.wait().await;
            Ev::Stop
        };
        let looking = self.disconnected_at.is_some() && self.moving.is_none();
        let look = async {
            match looking {
                true => async_io::Timer::after(MOVE_POLL).await,
                _ => async_io::Timer::never().await,
            };
            Ev::LookForMembers
        };
        let moving = &mut self.moving;
        let moved = async {
            match moving.as_mut() {
                Some(attempt) => Ev::Moved(attempt.await),
                None => future::pending().await,
            }
        };
        future::or(
            stop,
            future::or(
                changed,
                future::or(
                    timer,
                    future::or(
                        beat,
                        future::or(vouched, future::or(look, future::or(moved, confirmed))),
                    ),
                ),
            ),
        )
        .await
    }

    /// Acts on `ev`; the session's end, if it ended.
    fn handle(&mut self, ev: Ev) -> Option<End> {
        if self.shared.lease.timed_out() && !matches!(ev, Ev::Stop) {
            // This process stood still for longer than the session timeout.
            tracing::warn!(
                "nothing heard from ZooKeeper for a whole session timeout; giving it up"
            );
            return Some(self.lost());
        }
        match ev {
            Ev::Stop => return Some(End::Stop),
            Ev::LostTimer => {
                // Nothing received for a whole session timeout: the server may have expired us.
                // Like Curator, give the session up and start a new one.
                tracing::warn!(
                    "session 0x{:x}: no answer from {} for too long; giving it up",
                    self.zk.session().id().0,
                    self.wire_hosts
                );
                return Some(self.lost());
            }
            Ev::Beat => self.on_beat(),
            Ev::Vouched(ok) => {
                self.vouching = None;
                if ok {
                    self.shared.lease.heard();
                    self.trusted = true;
                }
            }
            Ev::LookForMembers => self.look_for_members(),
            Ev::Moved(None) => self.moving = None,
            // Taken even if the old wire client came back meanwhile: the server gave the
            // session to the newer connection.
            Ev::Moved(Some((next, hosts))) => return Some(End::Moved(next, hosts)),
            Ev::State(zk::SessionState::Disconnected) => self.on_disconnected(),
            Ev::State(
                state @ (zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly),
            ) => self.on_connected(state),
            Ev::Confirmed(false, _) => self.confirming = None,
            Ev::Confirmed(true, state) => self.on_confirmed(state),
            Ev::State(state) => {
                tracing::warn!("ZooKeeper session ended: {state}");
                return Some(self.lost());
            }
        }
        None
    }

    /// The session is given up: `Lost` to the listeners.
    fn lost(&self) -> End {
        self.shared.set(ConnectionState::Lost, |_| {});
        End::SessionOver
    }

    /// The lease's heartbeat: renews the lease while the connection is trusted; a beat that
    /// comes late means the process stood still, and only a round trip sent since renews it.
    fn on_beat(&mut self) {
        let now = Instant::now();
        if now - self.last_beat > self.late {
            tracing::debug!("the Client stood still for {:?}", now - self.last_beat);
            self.trusted = false;
            if self.vouching.is_none() {
                let zk = self.zk.clone();
                self.vouching = Some(Box::pin(async move { zk.check_stat("/").await.is_ok() }));
            }
        } else if self.trusted && self.lost_at.is_none() {
            self.shared.lease.heard();
        }
        self.last_beat = now;
    }

    /// Disconnected long enough, with members the wire client does not know: starts moving
    /// the session to them.
    fn look_for_members(&mut self) {
        let long_enough = self
            .disconnected_at
            .is_some_and(|at| at.elapsed() >= move_grace(self.shared));
        let members = self.shared.hosts.lock().clone();
        let fresh = super::ensemble::new_hosts(&members, self.wire_hosts);
        if long_enough && !fresh.is_empty() {
            let session = self.zk.session().clone();
            tracing::info!(
                "no answer from {}: moving session 0x{:x} to {members}",
                self.wire_hosts,
                session.id().0
            );
            self.moving = Some(Box::pin(move_session(self.shared, session, fresh, members)));
        }
    }

    /// `Suspended`, and the timer after which the session is given up.
    fn on_disconnected(&mut self) {
        self.confirming = None;
        self.disconnected_at.get_or_insert_with(Instant::now);
        if self.lost_at.is_none() {
            // The last byte arrived at least `idle` ago (or later, if the socket broke).
            let margin = self.idle + self.idle / 8;
            self.lost_at = Some(Instant::now() + self.negotiated.saturating_sub(margin));
            self.shared.set(ConnectionState::Suspended, |_| {});
        }
    }

    /// The wire client says it is connected as soon as the server answers the connect
    /// request; if that connection breaks before the session is set up on it, it goes back to
    /// its hosts without saying it is disconnected again (until one of them accepts a
    /// connection). So a reconnection counts once a request went through it: until then the
    /// Lost timer runs on and the session may still move.
    fn on_connected(&mut self, state: zk::SessionState) {
        let zk = self.zk.clone();
        self.confirming = Some((
            Box::pin(async move { zk.check_stat("/").await.is_ok() }),
            state,
        ));
    }

    /// A round trip went through the reconnection: the session is back.
    fn on_confirmed(&mut self, state: zk::SessionState) {
        self.confirming = None;
        self.disconnected_at = None;
        self.moving = None;
        self.lost_at = None;
        self.shared.lease.heard();
        self.trusted = true;
        self.shared.set(
            match state {
                zk::SessionState::ConnectedReadOnly => ConnectionState::ReadOnly,
                _ => ConnectionState::Reconnected,
            },
            |_| {},
        );
    }
}

/// The wire client's idle timeout for a configured one (see its `Session::reset_timeout`).
fn idle_timeout(configured: Duration, negotiated: Duration) -> Duration {
    let tick = if configured.is_zero() || configured > negotiated * 3 / 5 {
        negotiated / 20
    } else {
        configured / 8
    };
    tick.max(Duration::from_millis(1)) * 8
}

/// Closes the session (the wire client sends CloseSession once its last handle drops) and waits
/// briefly for it, so ephemeral nodes go at once rather than at session expiry.
async fn close_session(zk: zk::Client) {
    let mut watcher = zk.state_watcher();
    drop(zk);
    let closed = async {
        while !watcher.state().is_terminated() {
            watcher.changed().await;
        }
    };
    future::or(closed, sleep(Duration::from_secs(2))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_follows_the_wire_client() {
        let s = Duration::from_secs(3);
        assert_eq!(
            idle_timeout(Duration::from_secs(1), s),
            Duration::from_secs(1)
        );
        // Configured above 3/5 of the negotiated timeout: the wire client uses 2/5 of it.
        assert_eq!(
            idle_timeout(Duration::from_secs(3), s),
            Duration::from_millis(1200)
        );
        assert!(idle_timeout(s / 3, s) < s * 2 / 3);
    }
}
