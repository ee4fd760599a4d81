//! One logging story: zklock logs through `tracing`, so a tracing subscriber sees zklock's events
//! and the wire client's (zookeeper-client) side by side — here, why the connection went away.
//! (`tests/logging_log.rs` shows the same reaching a `log` logger.)

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::ConnectionState;

/// Everything the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_tracing_subscriber_hears_the_wire_clients_disconnect_reason_beside_zklocks_events() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("zklock=info,zookeeper_client=info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

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
