//! TLS on Redis (feature `tls`): zklock against a `redis-server` with a TLS port, trusting the
//! server's CA or not, with and without a client certificate.
#![cfg(feature = "tls")]

use std::error::Error as _;
use std::time::Duration;

use zklock::testing::TestingRedis;
use zklock::{Error, RedisClient, RedisClientBuilder, RedisMutex};

fn chain(e: &Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(" <- ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

fn tls_builder(server: &TestingRedis) -> RedisClientBuilder {
    RedisClient::builder(&server.tls_url().unwrap()).connect_timeout(Duration::from_secs(5))
}

fn lock_and_release(client: &RedisClient) {
    let mutex = RedisMutex::new(client, "tls").unwrap();
    let guard = mutex.lock().unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().unwrap();
}

#[test]
fn a_lock_over_tls_with_the_servers_ca() {
    let server = TestingRedis::start_tls(false).unwrap();
    let ca = server.tls().unwrap().ca_pem().to_owned();
    let client = tls_builder(&server).tls_ca_pem(&ca).connect().unwrap();
    lock_and_release(&client);
    client.close();
}

#[test]
fn a_server_signed_by_another_ca_is_refused_with_the_reason() {
    let server = TestingRedis::start_tls(false).unwrap();
    let other = server.tls().unwrap().untrusted_ca_pem().to_owned();
    let e = tls_builder(&server)
        .tls_ca_pem(&other)
        .connect()
        .expect_err("an untrusted server");
    let text = chain(&e);
    match e {
        Error::ConnectFailed { cause, .. } => assert!(matches!(*cause, Error::Tls(_)), "{text}"),
        other => panic!("{other:?}"),
    }
    assert!(text.contains("certificate"), "{text}");
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_one() {
    let server = TestingRedis::start_tls(true).unwrap();
    let tls = server.tls().unwrap();
    let without = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .expect_err("no client certificate");
    assert!(
        matches!(without, Error::ConnectFailed { .. }),
        "{}",
        chain(&without)
    );
    let client = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .tls_identity_pem(tls.client_cert_pem(), tls.client_key_pem())
        .connect()
        .unwrap();
    lock_and_release(&client);
    client.close();
}
