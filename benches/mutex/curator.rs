//! Curator 5's InterProcessMutex under the same loads, in a JVM (`--with-curator`):
//! `benches/java/CuratorBench.java`.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use crate::counters::{Deltas, Zk};
use crate::{Res, STALL};

/// Curator 5's InterProcessMutex in a JVM.
pub struct Curator {
    classes: std::path::PathBuf,
    classpath: String,
}

const CURATOR_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
];

const SLF4J_NOP: &str = "/usr/share/java/slf4j-nop.jar";

impl Curator {
    pub fn compile() -> Res<Curator> {
        if let Some(missing) = CURATOR_JARS
            .iter()
            .find(|j| !std::path::Path::new(j).exists())
        {
            return Err(format!(
                "--with-curator needs Debian's Curator ({missing} is missing): \
                 apt-get install libcurator-recipes-java default-jdk-headless"
            )
            .into());
        }
        let mut classpath = CURATOR_JARS.join(":");
        // Quiet slf4j (Curator logs nothing the bench needs), if Debian's binding is there.
        if std::path::Path::new(SLF4J_NOP).exists() {
            classpath = format!("{classpath}:{SLF4J_NOP}");
        }
        let classes =
            std::env::temp_dir().join(format!("zklock-bench-java-{}", std::process::id()));
        std::fs::create_dir_all(&classes)?;
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/java/CuratorBench.java"
        );
        let status = std::process::Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(&classes)
            .args(["-cp", &classpath, source])
            .status()
            .map_err(|e| format!("--with-curator needs javac (a JDK): {e}"))?;
        if !status.success() {
            return Err(format!("javac failed on {source}").into());
        }
        Ok(Curator { classes, classpath })
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
        use std::process::{Command, Stdio};
        let mut child = Command::new("java")
            .args(["-Xmx512m", "-XX:+UseSerialGC", "-cp"])
            .arg(format!("{}:{}", self.classes.display(), self.classpath))
            .args(["CuratorBench", mode, &zk.connect])
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

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}
