//! After `close()` every thread a Client started has exited (the shared I/O thread too, when it
//! was the process's last Client). Alone in its test binary, so no
//! other test's Client threads are counted.

mod common;

use std::time::Duration;

use zklock::testing::TestingServer;

fn zklock_threads() -> Vec<String> {
    // The process's I/O thread (shared by its Clients) and each Client's watcher thread.
    common::thread_names()
        .into_iter()
        .filter(|name| name == "zklock-io" || name.starts_with("zklock-watch-"))
        .collect()
}

#[test]
fn close_and_drop_end_every_thread_the_client_started() {
    let server = TestingServer::start().unwrap();
    assert_eq!(zklock_threads(), Vec::<String>::new());
    let client = common::client(&server.connect_string(), Duration::from_secs(20));
    let clone = client.clone();
    assert_eq!(zklock_threads().len(), 2, "{:?}", zklock_threads());
    let (_, _, watch) = {
        client.create("/t").call().unwrap();
        client.data_watch("/t").unwrap()
    };
    client.close();
    assert_eq!(zklock_threads(), Vec::<String>::new());
    // The watch can only have seen its session end.
    let event = watch.try_event();
    assert!(
        event
            .as_ref()
            .is_none_or(|e| e.kind == zklock::zookeeper::WatchEventKind::SessionEnded),
        "{event:?}"
    );
    drop(clone);

    // Dropping the last handle closes the session (waiting for its answer, 1 s at most); the
    // threads end by themselves.
    let dropped = common::client(&server.connect_string(), Duration::from_secs(20));
    assert_eq!(zklock_threads().len(), 2);
    drop(dropped);
    common::wait_for("the dropped Client's threads to end", || {
        zklock_threads().is_empty()
    });
}
