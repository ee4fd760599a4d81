//! Curator 5's InterProcessMutex under the same loads, in a JVM (`--with-curator`):
//! `benches/java/CuratorBench.java`.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use crate::counters::{Deltas, Zk};
use crate::curator_jvm::CuratorJvm;
use crate::{Res, STALL};

/// Curator 5's InterProcessMutex in a JVM.
pub struct Curator(CuratorJvm);

impl Curator {
    pub fn compile() -> Res<Curator> {
        CuratorJvm::compile("leave out --with-curator").map(Curator)
    }

    /// Runs `n` Curator contenders on `path` for `secs`: (handoffs, elapsed, server counters
    /// with the JVM's CPU as the client's).
    pub fn contended(
        &self,
        zk: &Zk,
        path: &str,
        n: usize,
        secs: Duration,
    ) -> Res<(u64, Duration, Deltas)> {
        let args = [n.to_string(), secs.as_millis().to_string(), path.to_owned()];
        // curator handoffs <n> elapsed_ms <ms> cpu_ms <ms>
        let (f, counters) = self.run(zk, "contended", &args, |_| Ok(()))?;
        let (handoffs, elapsed) = (f(2)?, Duration::from_millis(f(4)?));
        Ok((handoffs, elapsed, counters(Duration::from_millis(f(6)?))))
    }

    /// A drain of `q` Curator waiters sharing `clients` CuratorFrameworks, each holding
    /// `hold`: (drain time, head / tail time per handoff, server counters).
    pub fn drain(
        &self,
        zk: &Zk,
        path: &str,
        q: usize,
        clients: usize,
        hold: Duration,
    ) -> Res<(Duration, f64, Deltas)> {
        let args = [
            q.to_string(),
            clients.to_string(),
            hold.as_millis().to_string(),
            path.to_owned(),
        ];
        // Every waiter parked on its watch before the holder lets go, as for zklock's drain.
        let queued = |zk: &Zk| crate::await_watches(zk, q);
        // curator drain_us <us> head_us <us> tail_us <us> cpu_ms <ms>
        let (f, counters) = self.run(zk, "drain", &args, queued)?;
        let k = (q / 10).max(1) as f64;
        let (head, tail) = (f(4)? as f64 / k, f(6)? as f64 / k);
        Ok((
            Duration::from_micros(f(2)?),
            head / tail,
            counters(Duration::from_millis(f(8)?)),
        ))
    }

    /// Starts the JVM in `mode`, waits for "ready" and then for `ready`, reads the counters,
    /// says "go", reads the result line and the counters again. Gives the result's numeric
    /// fields by index, and the counters with the JVM's CPU put in as the client's.
    #[allow(clippy::type_complexity)] // a readiness probe closure, written out once
    fn run(
        &self,
        zk: &Zk,
        mode: &str,
        args: &[String],
        ready: impl Fn(&Zk) -> Res<()>,
    ) -> Res<(impl Fn(usize) -> Res<u64>, impl FnOnce(Duration) -> Deltas)> {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = self
            .0
            .command("512m", &[mode, &zk.connect])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let outcome = (|| -> Res<_> {
            let mut lines =
                std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
            let mut next = || -> Res<String> { Ok(lines.next().ok_or("the Curator JVM ended")??) };
            while next()? != "ready" {}
            ready(zk)?;
            let before = zk.mntr();
            writeln!(child.stdin.as_mut().ok_or("no stdin")?, "go")?;
            let result = next()?;
            let after = zk.mntr();
            Ok((result, before, after))
        })();
        // The JVM closes its clients and exits; a bench never hangs on it.
        let deadline = Instant::now() + STALL;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline || outcome.is_err() {
                eprintln!("the Curator JVM did not exit; killing it");
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let (result, before, after) = outcome?;
        let fields: Vec<u64> = result
            .split_whitespace()
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        let field =
            move |i: usize| -> Res<u64> { Ok(*fields.get(i).ok_or("short Curator result")?) };
        let counters = move |cpu: Duration| {
            before.zip(after).map(|(mut a, mut b)| {
                a.client_cpu = Some(Duration::ZERO);
                b.client_cpu = Some(cpu);
                (a, b)
            })
        };
        Ok((field, counters))
    }
}
