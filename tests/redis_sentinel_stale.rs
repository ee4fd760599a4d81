//! Redis Sentinel with one stale sentinel: it goes on naming an old primary that still answers
//! as one, as a sentinel cut off with that primary by a partition does, while the other
//! sentinels name the real primary. One sentinel's word decides nothing: a Client whose URL
//! asks the stale sentinel first still goes to the primary the majority names, so it never
//! holds a lock that a Client of the majority's primary holds too.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{FaultProxy, TestingRedis, TestingSentinel};
use zklock::RedisClient;

/// A sentinel that names `127.0.0.1:port` as the primary for ever and answers `+OK` to
/// anything else (the client's set-up commands): the view of a sentinel partitioned away with
/// an old primary.
struct StaleSentinel {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl StaleSentinel {
    fn start(primary: u16) -> StaleSentinel {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        thread::spawn(move || serve(conn, primary));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        StaleSentinel { port, stop }
    }
}

impl Drop for StaleSentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers each command (a RESP array of bulk strings) on `conn` until it closes.
fn serve(conn: TcpStream, primary: u16) {
    let _ = conn.set_nonblocking(false);
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some(n) = line
            .trim()
            .strip_prefix('*')
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return;
        };
        let mut args = Vec::new();
        for _ in 0..n {
            let mut len = String::new();
            let mut arg = String::new();
            if reader.read_line(&mut len).unwrap_or(0) == 0
                || reader.read_line(&mut arg).unwrap_or(0) == 0
            {
                return;
            }
            args.push(arg.trim_end().to_ascii_uppercase());
        }
        let answer = match args.first().map(String::as_str) {
            Some("SENTINEL")
                if args.get(1).map(String::as_str) == Some("GET-MASTER-ADDR-BY-NAME") =>
            {
                let port = primary.to_string();
                format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
            }
            Some("PING") => "+PONG\r\n".to_owned(),
            _ => "+OK\r\n".to_owned(),
        };
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

const TRIALS: usize = 20;

/// Twenty trials: a Client whose URL asks the stale sentinel first and a Client of the real
/// sentinels each try the same lock. At most one may hold it; and the stale sentinel's
/// primary never gets a lock.
#[test]
fn a_single_stale_sentinel_cannot_send_a_client_to_its_old_primary() {
    let set = TestingSentinel::start().unwrap();
    let old = TestingRedis::start().unwrap();
    let stale = StaleSentinel::start(old.port());
    let ports = set.sentinel_ports();
    let stale_first = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/{}",
        stale.port,
        ports[1],
        ports[2],
        set.master_name()
    );
    let mut both = 0;
    for trial in 0..TRIALS {
        let a = RedisClient::builder(&stale_first)
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .expect("connect with a stale first sentinel");
        let b = RedisClient::builder(&set.url()).connect().unwrap();
        let name = format!("stale-{trial}");
        let ours = RedisMutex::new(&a, &name).unwrap();
        let theirs = RedisMutex::new(&b, &name).unwrap();
        let g1 = ours.try_lock().unwrap();
        let g2 = theirs.try_lock().unwrap();
        if g1.is_some() && g2.is_some() {
            both += 1;
        }
        drop(g1);
        drop(g2);
    }
    let on_old = old.command(&["KEYS", "zklock:*"]).unwrap();
    println!(
        "{TRIALS} trials with a stale first sentinel: both Clients held the lock in {both}; \
         locks on the stale sentinel's primary: {:?}",
        on_old
    );
    assert_eq!(both, 0, "two holders of one lock");
    assert_eq!(on_old, "", "no lock on the stale sentinel's primary");
}

/// What deciding by a majority costs a holder: its keeper asks a majority of the sentinels
/// (two of three) at every renewal round, where one answer used to do. Each sentinel is
/// reached through a proxy that counts the connections.
#[test]
fn the_keeper_asks_a_majority_of_the_sentinels_each_round() {
    let ttl = Duration::from_secs(3);
    let set = TestingSentinel::start().unwrap();
    let proxies: Vec<FaultProxy> = set
        .sentinel_ports()
        .iter()
        .map(|p| FaultProxy::start_raw(("127.0.0.1", *p)).unwrap())
        .collect();
    let hosts: Vec<String> = proxies.iter().map(FaultProxy::connect_string).collect();
    let url = format!("redis+sentinel://{}/{}", hosts.join(","), set.master_name());
    let client = RedisClient::builder(&url).ttl(ttl).connect().unwrap();
    let mutex = RedisMutex::new(&client, "majority-cost").unwrap();
    let guard = mutex.lock().unwrap();
    let count = || -> Vec<u64> {
        proxies
            .iter()
            .map(|p| p.stats().connections_accepted)
            .collect()
    };
    let before = count();
    let began = Instant::now();
    // Four renewal periods (a third of the TTL each).
    thread::sleep(ttl / 3 * 4);
    let after = count();
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let rounds = began.elapsed().as_secs_f64() / (ttl / 3).as_secs_f64();
    println!(
        "sentinel connections over {rounds:.1} renewal periods: {delta:?}, {:.2} per round",
        delta.iter().sum::<u64>() as f64 / rounds
    );
    assert!(
        delta.iter().filter(|d| **d > 0).count() >= 2,
        "the keeper asked fewer than a majority: {delta:?}"
    );
    guard.release().unwrap();
}
