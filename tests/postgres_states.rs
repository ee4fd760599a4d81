//! The PostgreSQL Client's connection states against a real server: `Connected`, then
//! `Suspended`, `Lost` and `Reconnected` across a frozen server, with and without a hold.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::postgres::client;
use common::{patience, wait_for};

use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::{ConnectionState, PgClient};

/// Every state `rx` receives until `last`, in order.
fn states_until(
    rx: &zklock::Receiver<ConnectionState>,
    last: ConnectionState,
) -> Vec<ConnectionState> {
    let mut seen = Vec::new();
    while seen.last() != Some(&last) {
        match rx.recv_timeout(patience()) {
            Ok(state) => seen.push(state),
            Err(_) => panic!("no {last:?}; saw {seen:?}"),
        }
    }
    seen
}

#[test]
fn a_frozen_server_reads_suspended_then_lost_then_reconnected() {
    let server = TestingPostgres::start().unwrap();
    // Suspended lasts half the session timeout: 3 s to see it on a loaded machine.
    let c = PgClient::builder(&server.url())
        .session_timeout(Duration::from_secs(6))
        .connect()
        .unwrap();
    assert_eq!(c.state(), ConnectionState::Connected);
    assert!(c.is_connected());
    let states = c.connection_states();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let id = {
        let heard = heard.clone();
        c.on_connection_state(move |s| heard.lock().unwrap().push(s))
    };
    // Quiet for longer than the session timeout: the Client's own heartbeat keeps it
    // Connected.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(c.state(), ConnectionState::Connected);
    server.pause().unwrap();
    let seen = states_until(&states, ConnectionState::Lost);
    assert_eq!(
        seen,
        vec![ConnectionState::Suspended, ConnectionState::Lost]
    );
    server.resume().unwrap();
    assert_eq!(
        states_until(&states, ConnectionState::Reconnected),
        vec![ConnectionState::Reconnected]
    );
    wait_for("the listener to hear all three", || {
        heard.lock().unwrap().len() == 3
    });
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            ConnectionState::Suspended,
            ConnectionState::Lost,
            ConnectionState::Reconnected
        ]
    );
    assert!(c.remove_connection_state_listener(id));
    assert!(!c.remove_connection_state_listener(id));
}

#[test]
fn a_holds_heartbeats_judge_the_state_too() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "held").unwrap();
    let guard = mutex.lock().unwrap();
    let states = c.connection_states();
    server.pause().unwrap();
    assert_eq!(
        states_until(&states, ConnectionState::Suspended),
        vec![ConnectionState::Suspended]
    );
    server.resume().unwrap();
    assert_eq!(
        states_until(&states, ConnectionState::Reconnected),
        vec![ConnectionState::Reconnected]
    );
    drop(guard);
}
