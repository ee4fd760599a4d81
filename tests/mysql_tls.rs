//! MySQL over TLS (feature `tls`) against a real MariaDB that requires it
//! (`require_secure_transport = ON`): `ssl-mode=VERIFY_IDENTITY` with the test CA takes a lock,
//! a clear connection is refused by the server with a message that says so, an untrusted CA
//! is refused with the handshake's reason, a client certificate is sent when named, and bad
//! TLS options are refused before any I/O.
#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::time::Duration;

use common::chain;
use zklock::mysql::MySqlMutex;
use zklock::testing::TestingMariaDb;
use zklock::{Error, Lock, MySqlClient};

fn connect(url: &str) -> zklock::Result<MySqlClient> {
    MySqlClient::builder(url)
        .connect_timeout(Duration::from_secs(10))
        .connect()
}

/// The server's count of TLS handshakes it completed.
fn tls_accepts(server: &TestingMariaDb) -> u64 {
    let rows = server
        .root_sql("SHOW GLOBAL STATUS LIKE 'Ssl_finished_accepts'")
        .unwrap();
    rows[0][1].parse().unwrap()
}

fn lock_and_release(client: &MySqlClient) -> u64 {
    let mutex = MySqlMutex::new(client, "tls").unwrap();
    let guard = mutex.lock().unwrap();
    let token = guard.fencing_token();
    assert!(token > 0);
    guard.release().unwrap();
    token
}

#[test]
fn a_lock_over_tls_with_verify_identity_and_the_test_ca() {
    let server = TestingMariaDb::start_tls().unwrap();
    let before = tls_accepts(&server);
    let client = connect(&server.url_tls()).unwrap();
    let first = lock_and_release(&client);
    assert!(lock_and_release(&client) > first);
    // The server takes no TCP connection in the clear (the next test), and it counted the
    // handshakes (the `mariadb` client reading them may use TLS on the socket too).
    let after = tls_accepts(&server);
    println!("TLS handshakes the server finished: {before} -> {after}");
    assert!(after > before, "{before} -> {after}");
    client.close();

    // The table mode over TLS, through `zklock::connect` (as the command line takes a URL).
    let any = zklock::connect(&format!("{}&lock_mode=table", server.url_tls()))
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let mutex = any.mutex("tls-table").unwrap();
    assert!(mutex.acquire_timeout(Duration::from_secs(60)).unwrap());
    assert!(mutex.fencing_token().unwrap() > 0);
    mutex.release().unwrap();
    any.close();

    // REQUIRED checks as much as VERIFY_IDENTITY; VERIFY_CA the chain; both connect.
    for mode in ["REQUIRED", "verify_ca", "Verify-Identity"] {
        let url = server
            .url_tls()
            .replace("ssl-mode=VERIFY_IDENTITY", &format!("ssl_mode={mode}"));
        let client = connect(&url).unwrap_or_else(|e| panic!("{mode}: {}", chain(&e)));
        lock_and_release(&client);
        client.close();
    }
}

#[test]
fn a_clear_connection_is_refused_by_a_server_that_requires_tls() {
    let server = TestingMariaDb::start_tls().unwrap();
    for url in [
        server.url(),
        format!("{}?ssl-mode=DISABLED", server.url()),
        format!("{}?ssl-mode=PREFERRED", server.url()),
    ] {
        match connect(&url) {
            Err(e @ Error::ConnectFailed { .. }) => {
                let why = chain(&e);
                println!("{why}");
                assert!(why.contains("may require TLS"), "{why}");
                assert!(why.contains("ssl-mode=VERIFY_IDENTITY"), "{why}");
            }
            other => panic!("{url}: not refused: {other:?}"),
        }
    }
}

#[test]
fn an_untrusted_ca_is_refused_as_such() {
    let server = TestingMariaDb::start_tls().unwrap();
    let untrusted = server.dir().join("untrusted-ca.pem");
    std::fs::write(&untrusted, server.tls().unwrap().untrusted_ca_pem()).unwrap();
    let with_untrusted = format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        server.url(),
        untrusted.display()
    );
    // Without ssl-ca, the crate's roots (Mozilla's) do not hold the test CA either.
    let without_ca = format!("{}?ssl-mode=VERIFY_CA", server.url());
    for url in [with_untrusted, without_ca] {
        match connect(&url) {
            Err(e @ Error::ConnectFailed { .. }) => {
                let why = chain(&e);
                println!("{why}");
                match &e {
                    Error::ConnectFailed { cause, .. } => {
                        assert!(matches!(**cause, Error::Tls(_)), "{why}")
                    }
                    _ => unreachable!(),
                }
                assert!(why.contains("certificate is not trusted"), "{why}");
                assert!(why.contains("UnknownIssuer"), "{why}");
            }
            other => panic!("{url}: not refused: {other:?}"),
        }
    }
}

#[test]
fn a_client_certificate_is_sent_when_named() {
    let server = TestingMariaDb::start_tls().unwrap();
    server
        .root_sql("ALTER USER 'zklock'@'%' REQUIRE X509")
        .unwrap();
    match connect(&server.url_tls()) {
        Err(Error::ConnectFailed { cause, .. }) => {
            assert!(matches!(*cause, Error::AuthFailed(_)), "{cause:?}")
        }
        other => panic!("not refused without a certificate: {other:?}"),
    }
    let dir = server.dir().join("tls");
    let url = format!(
        "{}&ssl-cert={}&ssl-key={}",
        server.url_tls(),
        dir.join("client.pem").display(),
        dir.join("client.key").display()
    );
    let client = connect(&url).unwrap_or_else(|e| panic!("{}", chain(&e)));
    lock_and_release(&client);
    client.close();
}

/// Bad TLS options are refused before any I/O (port 9: nothing listens, nothing is sent).
#[test]
fn bad_tls_options_are_refused_before_any_io() {
    let base = "mysql://u:secret@127.0.0.1:9/db";
    let refused = |url: &str| match connect(url) {
        Err(Error::InvalidArgument(why)) => {
            assert!(!why.contains("secret"), "{why}");
            why
        }
        other => panic!("{url}: {other:?}"),
    };
    let why = refused(&format!("{base}?ssl-mode=ALWAYS"));
    assert!(
        why.contains("ssl-mode=ALWAYS")
            && why.contains("DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY"),
        "{why}"
    );
    let missing = Path::new("/nonexistent/zklock/ca.pem");
    let why = refused(&format!(
        "{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        missing.display()
    ));
    assert!(
        why.contains("ssl-ca=/nonexistent/zklock/ca.pem") && why.contains("cannot read"),
        "{why}"
    );
    let why = refused(&format!("{base}?ssl-ca={}", missing.display()));
    assert!(why.contains("ssl-mode"), "{why}");
    let why = refused(&format!("{base}?ssl-mode=REQUIRED&ssl-key=/etc/hostname"));
    assert!(why.contains("ssl-cert and ssl-key"), "{why}");
}
