//! SASL DIGEST-MD5 (feature `sasl-digest-md5`) against a ZooKeeper that requires it.
#![cfg(feature = "sasl-digest-md5")]

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::zookeeper::Perms;
use zklock::{Acl, Client, ClientBuilder, Error, InterProcessMutex};

fn builder(server: &TestingServer) -> ClientBuilder {
    Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(5))
}

fn refused(builder: ClientBuilder) -> Error {
    match builder.connect() {
        Err(Error::ConnectFailed { cause, .. }) => *cause,
        other => panic!("expected ConnectFailed, got {other:?}"),
    }
}

#[test]
fn an_authenticated_client_locks_and_is_known_by_the_sasl_scheme() {
    init_logging();
    let server = TestingServer::start_sasl(&[("alice", "secret"), ("bob", "hunter2")]).unwrap();
    let alice = builder(&server)
        .sasl_digest_md5("alice", "secret")
        .connect()
        .expect("alice logs in");
    let bob = builder(&server)
        .sasl_digest_md5("bob", "hunter2")
        .connect()
        .expect("bob logs in");
    let a = InterProcessMutex::new(&alice, "/locks/sasl").unwrap();
    let b = InterProcessMutex::new(&bob, "/locks/sasl").unwrap();
    let guard = a.lock().unwrap();
    assert!(b.try_lock_for(Duration::ZERO).unwrap().is_none());
    guard.release().unwrap();
    b.lock().unwrap().release().unwrap();

    // The session's identity is `sasl:alice`.
    alice
        .create("/alice-only")
        .acl(vec![Acl::new(Perms::ALL, "sasl", "alice")])
        .call()
        .unwrap();
    alice.set_data("/alice-only", b"mine").unwrap();
    assert!(matches!(
        bob.set_data("/alice-only", b"theirs"),
        Err(Error::NoAuth(_))
    ));
}

#[test]
fn an_unauthenticated_or_wrong_client_gets_a_clear_error() {
    init_logging();
    let server = TestingServer::start_sasl(&[("alice", "secret")]).unwrap();
    let none = refused(builder(&server));
    assert!(matches!(none, Error::AuthFailed(_)), "{none:?}");
    let wrong = refused(builder(&server).sasl_digest_md5("alice", "wrong"));
    assert!(matches!(wrong, Error::AuthFailed(_)), "{wrong:?}");
    assert!(matches!(
        builder(&server).sasl_digest_md5("", "x").build(),
        Err(Error::InvalidArgument(_))
    ));
}
