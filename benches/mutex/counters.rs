//! What a case costs: the server's counters (`mntr`, the JVM's `/proc/<pid>/io`) and this
//! process's CPU, in all and by thread.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use zklock::testing::TestingServer;
use zklock::Client;

use crate::{Res, SESSION_TIMEOUT};

/// Where ZooKeeper is, and how to ask it four-letter words.
pub struct Zk {
    pub server: Option<TestingServer>,
    pub connect: String,
}

impl Zk {
    pub fn four_letter(&self, cmd: &str) -> Option<String> {
        match &self.server {
            Some(s) => s.four_letter(cmd).ok(),
            None => {
                // First host of ZK_CONNECT (mntr must be whitelisted there).
                let host = self.connect.split(',').next()?.split('/').next()?;
                let mut s = TcpStream::connect(host).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                s.write_all(cmd.as_bytes()).ok()?;
                let mut out = String::new();
                s.read_to_string(&mut out).ok()?;
                Some(out)
            }
        }
    }

    pub fn mntr(&self) -> Option<Counters> {
        let text = self.four_letter("mntr")?;
        let map: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let num = |k: &str| map.get(k).and_then(|v| v.parse::<u64>().ok());
        Some(Counters {
            packets: num("zk_packets_received")?,
            reads: num("zk_cnt_readlatency").unwrap_or(0),
            writes: num("zk_cnt_updatelatency").unwrap_or(0),
            fsyncs: num("zk_cnt_fsynctime"),
            out_bytes: self.server_written(),
            client_cpu: client_cpu(),
        })
    }

    /// Bytes the server's JVM has written (`wchar` of `/proc/<pid>/io`), TestingServer only.
    fn server_written(&self) -> Option<u64> {
        let pid = self.server.as_ref()?.pid()?;
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
        io.lines()
            .find_map(|l| l.strip_prefix("wchar:"))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Total watches on the server (`wchs`), if it answers.
    pub fn watches(&self) -> Option<u64> {
        let text = self.four_letter("wchs")?;
        text.lines()
            .find_map(|l| l.strip_prefix("Total watches:"))
            .and_then(|n| n.trim().parse().ok())
    }

    pub fn client(&self) -> Res<Client> {
        Ok(Client::builder(&self.connect)
            .session_timeout(SESSION_TIMEOUT)
            .connect()?)
    }
}

/// Server-side counters from `mntr`, and this process's CPU time.
#[derive(Clone, Copy)]
pub struct Counters {
    pub packets: u64,
    pub reads: u64,
    pub writes: u64,
    /// Transaction-log fsyncs (`zk_cnt_fsynctime`; ZooKeeper counts one per flushed batch,
    /// also with `forceSync=no`, where the flush does not reach the disk).
    pub fsyncs: Option<u64>,
    pub out_bytes: Option<u64>,
    /// User + system CPU of the whole bench process (every Client thread included).
    pub client_cpu: Option<Duration>,
}

/// CPU time of this process: every thread, including those that have ended.
pub fn client_cpu() -> Option<Duration> {
    Some(cpu(rustix::time::ClockId::ProcessCPUTime))
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> Duration {
    cpu(rustix::time::ClockId::ThreadCPUTime)
}

fn cpu(clock: rustix::time::ClockId) -> Duration {
    let t = rustix::time::clock_gettime(clock);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Counters before and after a case, if the server answered `mntr`.
pub type Deltas = Option<(Counters, Counters)>;

/// Per-operation server counters over `ops` operations, printable; with the CPU the calling
/// threads spent themselves (the rest of the process's CPU is the Clients' own threads).
pub struct PerOp(pub Deltas, pub usize, pub Option<Duration>);

impl PerOp {
    /// Process CPU per op, in ms.
    pub fn cpu_ms(&self) -> Option<f64> {
        let (a, b) = self.0?;
        Some(b.client_cpu?.saturating_sub(a.client_cpu?).as_secs_f64() * 1e3 / self.1.max(1) as f64)
    }

    /// Server bytes written per op, if known.
    pub fn bytes(&self) -> Option<f64> {
        let (a, b) = self.0?;
        Some(b.out_bytes?.saturating_sub(a.out_bytes?) as f64 / self.1.max(1) as f64)
    }
}

impl std::fmt::Display for PerOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some((a, b)) = self.0 else {
            return write!(
                f,
                "{:>7} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9}",
                "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"
            );
        };
        let per = |x: u64, y: u64| (y.saturating_sub(x)) as f64 / self.1.max(1) as f64;
        let bytes = match (a.out_bytes, b.out_bytes) {
            (Some(x), Some(y)) => format!("{:.0}", per(x, y)),
            _ => "n/a".into(),
        };
        let fsyncs = match (a.fsyncs, b.fsyncs) {
            (Some(x), Some(y)) => format!("{:.2}", per(x, y)),
            _ => "n/a".into(),
        };
        let cpu = self.cpu_ms().map_or("n/a".into(), |c| format!("{c:.3}"));
        let callers = self.2.map_or("n/a".into(), |c| {
            format!("{:.3}", c.as_secs_f64() * 1e3 / self.1.max(1) as f64)
        });
        write!(
            f,
            "{:>7.2} {:>6.2} {:>6.2} {fsyncs:>6} {bytes:>9} {cpu:>9} {callers:>9}",
            per(a.packets, b.packets),
            per(a.reads, b.reads),
            per(a.writes, b.writes),
        )
    }
}

pub const COUNTER_HEAD: &str = "pkts/op  reads writes fsyncs srv B/op cpu ms/op  callers ms";
