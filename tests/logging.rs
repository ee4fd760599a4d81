//! One logging story: zklock logs through `tracing`, so a tracing subscriber sees zklock's events
//! and the wire client's (zookeeper-client) side by side — here, why the connection went away.
//! (`tests/logging_log.rs` shows the same reaching a `log` logger.)

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::ConnectionState;

#[test]
fn a_tracing_subscriber_hears_the_wire_clients_disconnect_reason_beside_zklocks_events() {
    let captured = Captured::install("zklock=info,zookeeper_client=info");

    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let states = client.connection_states();
    server.stop().unwrap();
    expect_state(&states, ConnectionState::Suspended);
    wait_for("the wire client's reason and zklock's state change", || {
        let text = captured.text();
        let wire = text
            .lines()
            .any(|l| l.contains("zookeeper_client") && l.contains("due to"));
        let ours = text
            .lines()
            .any(|l| l.contains("zklock") && l.contains("Suspended"));
        wire && ours
    });
    server.restart().unwrap();
    expect_state(&states, ConnectionState::Reconnected);
    client.close();
}
