//! PostgreSQL over TLS (feature `tls`) against a real server with `ssl = on`: `verify-full`
//! checks the certificate and the host name, `verify-ca` the certificate only, an untrusted
//! CA is refused with the handshake's reason, and `disable` stays in the clear.

mod common;

use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::{Error, PgClient};

/// `url` (the server's) with `host` in place of 127.0.0.1 (reached at 127.0.0.1 through
/// `hostaddr`) and `params` added.
fn url(server: &TestingPostgres, host: &str, params: &str) -> String {
    let url = server.url().replace("@127.0.0.1:", &format!("@{host}:"));
    format!("{url}?hostaddr=127.0.0.1&{params}")
}

/// Whether the session of backend `pid` is encrypted, from `pg_stat_ssl`.
fn encrypted(server: &TestingPostgres, pid: i32) -> bool {
    let rows = server
        .sql(&format!("SELECT ssl FROM pg_stat_ssl WHERE pid = {pid}"))
        .unwrap();
    rows.first()
        .and_then(|r| r.first().cloned().flatten())
        .as_deref()
        == Some("t")
}

fn holder_backend(client: &PgClient) -> i32 {
    let mutex = PgMutex::new(client, "tls").unwrap();
    let guard = mutex.lock().unwrap();
    assert!(guard.fencing_token() > 0);
    let pid = mutex.backend_pid().unwrap();
    guard.release().unwrap();
    pid
}

#[test]
fn verify_full_encrypts_and_checks_the_certificate_and_the_host() {
    let server = TestingPostgres::start_tls().unwrap();
    let ca = server.tls().unwrap().ca_pem().to_owned();
    let client = PgClient::builder(&url(&server, "localhost", "sslmode=verify-full"))
        .tls_ca_pem(&ca)
        .connect()
        .unwrap();
    assert!(encrypted(&server, holder_backend(&client)));
    client.close();

    // A name the certificate does not hold: refused by verify-full, taken by verify-ca.
    let wrong = url(&server, "not-the-server.invalid", "sslmode=verify-full");
    match PgClient::builder(&wrong).tls_ca_pem(&ca).connect() {
        Err(Error::ConnectFailed { cause, .. }) => match *cause {
            Error::Tls(why) => assert!(why.contains("handshake"), "{why}"),
            other => panic!("not a TLS refusal: {other:?}"),
        },
        other => panic!("not refused: {other:?}"),
    }
    let ca_only = url(&server, "not-the-server.invalid", "sslmode=verify-ca");
    let client = PgClient::builder(&ca_only)
        .tls_ca_pem(&ca)
        .connect()
        .unwrap();
    assert!(encrypted(&server, holder_backend(&client)));
    client.close();
}

#[test]
fn an_untrusted_ca_is_refused_and_disable_stays_clear() {
    let server = TestingPostgres::start_tls().unwrap();
    let tls = server.tls().unwrap();
    let require = url(&server, "localhost", "sslmode=require");
    match PgClient::builder(&require)
        .tls_ca_pem(tls.untrusted_ca_pem())
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            assert!(matches!(*cause, Error::Tls(_)), "{cause:?}")
        }
        other => panic!("not refused: {other:?}"),
    }
    // A CA without an sslmode that asks for TLS is a mistake, said before any I/O.
    let clear = url(&server, "localhost", "sslmode=prefer");
    let refused = PgClient::builder(&clear).tls_ca_pem(tls.ca_pem()).connect();
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("sslmode")),
        "{refused:?}"
    );
    let client = PgClient::connect(&url(&server, "localhost", "sslmode=disable")).unwrap();
    assert!(!encrypted(&server, holder_backend(&client)));
    client.close();
}

/// The CA from a file, as libpq takes it: `sslrootcert=PATH` in the string (or
/// `PGSSLROOTCERT`); a file that cannot be read, or `sslcert` without `sslkey`, is refused
/// with its name before any I/O; with `sslmode=disable` the files are not read.
#[test]
fn sslrootcert_names_the_ca_file() {
    let server = TestingPostgres::start_tls().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("root.crt");
    std::fs::write(&ca, server.tls().unwrap().ca_pem()).unwrap();
    let with_file = url(
        &server,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let client = PgClient::connect(&with_file).unwrap();
    assert!(encrypted(&server, holder_backend(&client)));
    client.close();

    let missing = dir.path().join("missing.crt");
    let refused = PgClient::connect(&url(
        &server,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", missing.display()),
    ));
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(why))
            if why.contains("sslrootcert") && why.contains("missing.crt")),
        "{refused:?}"
    );
    let half = PgClient::connect(&url(
        &server,
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}",
            ca.display(),
            ca.display()
        ),
    ));
    assert!(
        matches!(&half, Err(Error::InvalidArgument(why)) if why.contains("sslkey")),
        "{half:?}"
    );
    let clear = url(
        &server,
        "localhost",
        &format!("sslmode=disable&sslrootcert={}", missing.display()),
    );
    let client = PgClient::connect(&clear).unwrap();
    assert!(!encrypted(&server, holder_backend(&client)));
    client.close();
}
