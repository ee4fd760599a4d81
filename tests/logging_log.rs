//! A program that uses the `log` facade (env_logger and the like) and installs no tracing
//! subscriber still hears both zklock and the wire client: `tracing`'s `log` feature hands
//! their events to the `log` logger.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::ConnectionState;

/// (target, message) of every record.
static RECORDS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            RECORDS
                .lock()
                .unwrap()
                .push((record.target().to_owned(), record.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn heard(target: &str, text: &str) -> bool {
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .any(|(t, m)| t.starts_with(target) && m.contains(text))
}

#[test]
fn a_log_logger_hears_the_wire_clients_disconnect_reason_beside_zklocks_events() {
    log::set_logger(&Recorder).unwrap();
    log::set_max_level(log::LevelFilter::Info);

    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let states = client.connection_states();
    server.stop().unwrap();
    expect_state(&states, ConnectionState::Suspended);
    wait_for("the wire client's reason and zklock's state change", || {
        heard("zookeeper_client", "due to") && heard("zklock", "Suspended")
    });
    server.restart().unwrap();
    expect_state(&states, ConnectionState::Reconnected);
    client.close();
}
