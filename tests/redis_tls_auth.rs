//! TLS on Redis (feature `tls`), what `tests/redis_tls.rs` leaves out: a client certificate
//! through sentinels and on a cluster whose every server asks for one (`tls-auth-clients
//! yes`), and the refusal, with its cause, when none is given; a server certificate the client
//! trusts but that names another host than the one dialed, refused for its name.
#![cfg(feature = "tls")]

mod common;

use std::time::{Duration, Instant};

use common::{held_then_handed_over, refused_by_tls};
use zklock::redis::RedisClientBuilder;
use zklock::testing::{TestingRedis, TestingRedisCluster, TestingSentinel, TestingTls};
use zklock::RedisClient;

fn builder(url: &str, tls: &TestingTls) -> RedisClientBuilder {
    RedisClient::builder(url)
        .tls_ca_pem(tls.ca_pem())
        .connect_timeout(Duration::from_secs(5))
}

/// Connecting without a client certificate is refused at connect, with a TLS error as the
/// cause that says a certificate was wanted; with the certificate a lock is taken and given
/// back, another Client's `try_lock` refused meanwhile.
fn refused_without_and_served_with_a_client_certificate(url: &str, tls: &TestingTls, what: &str) {
    let started = Instant::now();
    let e = builder(url, tls)
        .connect()
        .expect_err("no client certificate");
    let text = refused_by_tls(&e);
    println!(
        "{what} without a client certificate, after {:?}: {text}",
        started.elapsed()
    );
    assert!(text.contains("CertificateRequired"), "{text}");
    // Refused at once: a certificate refused would be refused again.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let connect = || {
        builder(url, tls)
            .tls_identity_pem(tls.client_cert_pem(), tls.client_key_pem())
            .connect()
            .unwrap()
    };
    let (a, b) = (connect(), connect());
    held_then_handed_over(&a, &b, "tls-auth", || {});
    a.close();
    b.close();
}

#[test]
fn sentinels_and_data_nodes_that_ask_for_a_client_certificate_get_it() {
    let set = TestingSentinel::start_tls(true).unwrap();
    let tls = set.tls().unwrap();
    assert!(tls.requires_client_certificate());
    // The sentinels and the data nodes each ask: a sentinel answers only a Client with a
    // certificate, and so does the primary it names.
    let primary = set.primary().unwrap();
    let direct = format!("rediss://127.0.0.1:{}", primary.tls_port().unwrap());
    refused_without_and_served_with_a_client_certificate(&direct, tls, "the primary");
    refused_without_and_served_with_a_client_certificate(
        &set.tls_url().unwrap(),
        tls,
        "the sentinels",
    );
}

#[test]
fn cluster_nodes_that_ask_for_a_client_certificate_get_it() {
    let cluster = TestingRedisCluster::start_tls(true).unwrap();
    let tls = cluster.tls().unwrap();
    assert!(tls.requires_client_certificate());
    refused_without_and_served_with_a_client_certificate(
        &cluster.tls_url().unwrap(),
        tls,
        "the cluster",
    );
}

/// A certificate of the CA the client trusts, naming `elsewhere.invalid` only: dialed as
/// `localhost` (and as `127.0.0.1`) it is refused, and the cause says the name is why — not
/// the issuer, which the client trusts.
#[test]
fn a_trusted_certificate_for_another_name_is_refused_for_its_name() {
    let server = TestingRedis::start_tls_naming(false, &["elsewhere.invalid"]).unwrap();
    let tls = server.tls().unwrap();
    let port = server.tls_port().unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("rediss://{host}:{port}");
        let started = Instant::now();
        let e = builder(&url, tls).connect().expect_err("another name");
        let text = refused_by_tls(&e);
        println!("{url}, after {:?}: {text}", started.elapsed());
        assert!(text.contains("not valid for name"), "{text}");
        assert!(text.contains(host), "the name dialed: {text}");
        assert!(
            text.contains("elsewhere.invalid"),
            "the name presented: {text}"
        );
        assert!(!text.contains("UnknownIssuer"), "{text}");
    }
}

/// Through sentinels whose certificates name `localhost` only: the sentinels, dialed as
/// `localhost`, are trusted; the primary they name by its address, `127.0.0.1`, is refused for
/// its name at connect (the host the URL gave is not carried over to the nodes behind it).
#[test]
fn a_primary_whose_certificate_does_not_name_the_address_the_sentinels_give_is_refused() {
    let set = TestingSentinel::start_tls_naming(false, &["localhost"]).unwrap();
    let started = Instant::now();
    let e = builder(&set.tls_url().unwrap(), set.tls().unwrap())
        .connect()
        .expect_err("the primary's certificate does not name 127.0.0.1");
    let text = refused_by_tls(&e);
    println!("after {:?}: {text}", started.elapsed());
    assert!(text.contains(r#"not valid for name "127.0.0.1""#), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}
