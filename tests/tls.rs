//! TLS (feature `tls`): zklock against a ZooKeeper that serves clients only on a TLS
//! port, with and without client-certificate authentication.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, ClientBuilder, Error, InterProcessMutex};

fn tls_builder(server: &TestingServer) -> ClientBuilder {
    Client::builder(&server.tls_connect_string().unwrap())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(5))
}

/// `connect()` fails with `ConnectFailed`; its cause.
fn refused(builder: ClientBuilder) -> (Error, String) {
    let e = builder.connect().expect_err("must be refused");
    let text = chain(&e);
    eprintln!("{text}");
    match e {
        Error::ConnectFailed { cause, .. } => (*cause, text),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_mutex_works_over_tls_and_the_session_survives_a_restart() {
    init_logging();
    let mut server = TestingServer::start_tls(false).unwrap();
    let tls = server.tls().unwrap().clone();
    let client = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .expect("TLS connection");
    let other = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .unwrap();
    let a = InterProcessMutex::new(&client, "/locks/tls").unwrap();
    let b = InterProcessMutex::new(&other, "/locks/tls").unwrap();
    let guard = a.lock().unwrap();
    assert!(b.try_lock_for(Duration::ZERO).unwrap().is_none());
    let session = client.session_id();
    server.restart().unwrap();
    wait_for("the TLS client to reconnect", || client.is_connected());
    assert_eq!(
        client.session_id(),
        session,
        "the session survives the restart"
    );
    assert!(a.is_owned_by_current_thread());
    guard.release().unwrap();
    let g = b
        .try_lock_for(patience())
        .unwrap()
        .expect("free after release");
    g.release().unwrap();
}

#[test]
fn a_client_that_does_not_trust_the_servers_ca_is_refused_saying_why() {
    init_logging();
    let server = TestingServer::start_tls(false).unwrap();
    let tls = server.tls().unwrap();
    let (cause, text) = refused(tls_builder(&server).tls_ca_pem(tls.untrusted_ca_pem()));
    assert!(matches!(cause, Error::Tls(_)), "{text}");
    assert!(
        text.contains("not signed by a CA this client trusts"),
        "{text}"
    );
}

#[test]
fn a_tls_host_without_tls_options_is_refused_before_io() {
    let server = TestingServer::start_tls(false).unwrap();
    match tls_builder(&server).build() {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("tls_ca_pem"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        tls_builder(&server).tls_ca_pem("not a certificate").build(),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn with_client_certificates_required_only_a_client_with_one_gets_in() {
    init_logging();
    let server = TestingServer::start_tls(true).unwrap();
    let tls = server.tls().unwrap();
    assert!(tls.requires_client_certificate());
    let (cause, text) = refused(tls_builder(&server).tls_ca_pem(tls.ca_pem()));
    assert!(matches!(cause, Error::Tls(_)), "{text}");
    let client = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .tls_identity_pem(tls.client_cert_pem(), tls.client_key_pem())
        .connect()
        .expect("a client with a certificate gets in");
    let mutex = InterProcessMutex::new(&client, "/locks/mtls").unwrap();
    mutex.lock().unwrap().release().unwrap();
}

#[test]
fn a_client_without_tls_on_the_tls_port_is_told_it_speaks_tls() {
    init_logging();
    let server = TestingServer::start_tls(false).unwrap();
    let port = server.tls_connect_string().unwrap();
    let plain = port.replace("tcp+tls://", "");
    let (cause, text) = refused(
        Client::builder(&plain)
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(3)),
    );
    assert!(matches!(cause, Error::Tls(_)), "{text}");
    assert!(text.contains("tls_ca_pem"), "{text}");
}

#[test]
fn a_host_name_the_certificate_names_connects_and_verification_can_be_turned_off() {
    init_logging();
    let server = TestingServer::start_tls(false).unwrap();
    let tls = server.tls().unwrap();
    let by_name = server
        .tls_connect_string()
        .unwrap()
        .replace("127.0.0.1", "localhost");
    let client = Client::builder(&by_name)
        .connection_timeout(Duration::from_secs(5))
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .expect("the certificate names localhost");
    client.create("/named").call().unwrap();
    let unverified = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .tls_hostname_verification(false)
        .connect()
        .expect("still a trusted certificate");
    assert!(unverified.exists("/named").unwrap().is_some());
    // Hosts take TLS from the options; an explicit `tcp://` host stays plain.
    let plain_port = server.connect_string();
    let mixed = Client::builder(&format!("tcp://{plain_port}"))
        .connection_timeout(Duration::from_secs(5))
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .expect("plain port, explicitly");
    assert!(mixed.exists("/named").unwrap().is_some());
}
