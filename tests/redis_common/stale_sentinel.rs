//! [`StaleSentinel`]: a sentinel that names whatever primary the test tells it to, as one
//! partitioned away with an old primary goes on naming that one while the others have promoted
//! another.

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A sentinel on a free `127.0.0.1` port that names `127.0.0.1:<port>` as the primary (the
/// port [`name`](Self::name) set last) and answers `+OK` to anything else (the client's set-up
/// commands). Its listener stops when it is dropped.
pub struct StaleSentinel {
    pub port: u16,
    primary: Arc<AtomicU16>,
    stop: Arc<AtomicBool>,
}

impl StaleSentinel {
    pub fn start(primary: u16) -> StaleSentinel {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let named = Arc::new(AtomicU16::new(primary));
        let (stopped, naming) = (stop.clone(), named.clone());
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let naming = naming.clone();
                        thread::spawn(move || serve(conn, &naming));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        StaleSentinel {
            port,
            primary: named,
            stop,
        }
    }

    /// Names `127.0.0.1:<primary>` from now on.
    pub fn name(&self, primary: u16) {
        self.primary.store(primary, Ordering::SeqCst);
    }
}

impl Drop for StaleSentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers each command (a RESP array of bulk strings) on `conn` until it closes.
fn serve(conn: TcpStream, primary: &AtomicU16) {
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
                let port = primary.load(Ordering::SeqCst).to_string();
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
