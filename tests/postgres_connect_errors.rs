//! What a PostgreSQL connect error says: a name that does not resolve, a refused port, a host
//! that accepts and never answers, a server that wants TLS or a client that does; and no part
//! of the password in any error or `Debug` output, however malformed the URL.

mod common;

use std::time::Duration;

use zklock::testing::{SilentListener, TestingPostgres};
use zklock::{Error, PgClient};

const PASSWORD: &str = "zq7Sekr1t";

/// The error of a connect to `url` (one try, a short connection timeout), with its `Display`
/// and `Debug`, neither holding the password.
fn refused(url: &str) -> (Error, String) {
    let e = PgClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .retry_policy(zklock::RetryNTimes::new(0, Duration::from_millis(1)).unwrap())
        .connect()
        .expect_err("refused");
    let shown = format!("{e} / {e:?} / {}", common::chain(&e));
    assert!(!shown.contains("Sekr") && !shown.contains("7S"), "{shown}");
    (e, shown)
}

#[test]
fn a_name_that_does_not_resolve_is_named() {
    let (_, shown) = refused(&format!(
        "postgres://app:{PASSWORD}@nosuchhost.invalid:5432/db"
    ));
    println!("{shown}");
    assert!(shown.contains("nosuchhost.invalid"), "{shown}");
    assert!(shown.contains("does not resolve"), "{shown}");
}

#[test]
fn a_refused_port_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_, shown) = refused(&format!("postgres://app:{PASSWORD}@127.0.0.1:{port}/db"));
    println!("{shown}");
    assert!(shown.to_lowercase().contains("refused"), "{shown}");
    assert!(shown.contains(&port.to_string()), "{shown}");
}

#[test]
fn a_host_that_never_answers_is_named_after_the_per_host_bound() {
    let silent = SilentListener::start().unwrap();
    let (_, shown) = refused(&format!("postgres://app:{PASSWORD}@{}/db", silent.addr()));
    println!("{shown}");
    assert!(shown.contains(&silent.addr().port().to_string()), "{shown}");
    assert!(shown.contains("did not answer"), "{shown}");
    assert!(shown.contains("2s"), "the bound is named: {shown}");
}

#[cfg(feature = "tls")]
#[test]
fn a_client_that_wants_tls_from_a_server_without_it_is_told_so() {
    let server = TestingPostgres::start().unwrap();
    let url = format!(
        "{}?sslmode=require",
        server.url_as("zklock", PASSWORD, "postgres")
    );
    let (e, shown) = refused(&url);
    println!("{shown}");
    assert!(
        matches!(e, Error::ConnectFailed { .. } | Error::Tls(_)),
        "{e:?}"
    );
    assert!(shown.contains("TLS"), "{shown}");
}

#[test]
fn a_server_that_wants_tls_from_a_client_without_it_is_told_so() {
    let server = TestingPostgres::start_tls().unwrap();
    // Clear connections refused from now on: only `hostssl` lines are left.
    let hba = server.dir().join("data").join("pg_hba.conf");
    let text = std::fs::read_to_string(&hba).unwrap();
    let text = text
        .lines()
        .map(|l| match l.strip_prefix("host ") {
            Some(rest) => format!("hostssl {rest}"),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&hba, text).unwrap();
    server.sql("SELECT pg_reload_conf()").ok();
    let url = format!(
        "{}?sslmode=disable",
        server.url_as("zklock", PASSWORD, "postgres")
    );
    common::wait_for("the clear connections to be refused", || {
        PgClient::builder(&url).connect().is_err()
    });
    let (_, shown) = refused(&url);
    println!("{shown}");
    assert!(shown.contains("TLS"), "{shown}");
}

#[test]
fn malformed_urls_show_no_part_of_the_password() {
    for url in [
        "postgres://leak:zq7/Sekr1t%9@x@k:p/w@127.0.0.1:1/db",
        "postgres://leak:zq7@Sekr1t@127.0.0.1:1/db",
        "postgres://leak:zq7/Sekr1t@127.0.0.1:1/db",
        "postgres://leak:zq7:Sekr1t%zz@127.0.0.1:1/db",
        "postgres://127.0.0.1:1/db?password=zq7Sekr1t%zz",
        "host=127.0.0.1 port=1 password=zq7 Sekr1t",
    ] {
        let builder = PgClient::builder(url);
        let debug = format!("{builder:?}");
        assert!(!debug.contains("Sekr"), "{debug}");
        let (e, shown) = refused(url);
        println!("{url} → {shown}");
        assert!(
            matches!(e, Error::InvalidArgument(_)),
            "refused before any I/O: {e:?}"
        );
    }
}
