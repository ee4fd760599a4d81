//! Worker processes as the test sees them: zklock workers (this binary again), Curator JVMs
//! and kazoo workers (Python), started, stopped, frozen and killed, their report lines
//! collected.

use super::*;

pub(crate) const CURATOR_WORKER: JavaProgram = JavaProgram {
    class: "CuratorChaosWorker",
    recipes: "InterProcessMutex, LeaderSelector",
    scratch_prefix: "zklock-chaos-",
    stdout_tail: Some(30),
};

pub(crate) enum Proc {
    /// A child speaking the suite's line protocol on its stdin and stdout: a zklock worker
    /// (this binary) or a kazoo worker (Python).
    Piped {
        child: Child,
        stdin: Option<ChildStdin>,
        lines: mpsc::Receiver<String>,
    },
    Java(JavaProc),
}

/// A worker process: its `chaos: ` lines, its slots, whether it was meant to die.
pub(crate) struct WorkerProc {
    pub(crate) name: String,
    pub(crate) proc: Proc,
    /// Every `chaos: ` line so far, without the marker.
    pub(crate) events: Vec<String>,
    /// Killed by a fault: its missing stats are expected.
    pub(crate) killed: bool,
    pub(crate) exited: Option<bool>,
}

impl WorkerProc {
    pub(crate) fn rust(name: &str, spec: String) -> WorkerProc {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "chaos_worker",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(WORKER, spec);
        WorkerProc::piped(name, command)
    }

    /// Starts `command` with piped stdin and stdout, collecting its `chaos: ` lines.
    pub(crate) fn piped(name: &str, mut command: Command) -> WorkerProc {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start worker {name}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                // libtest may have begun the line with "test chaos_worker ... ".
                if let Some(at) = line.find(MARK) {
                    let _ = tx.send(line[at + MARK.len()..].to_owned());
                }
            }
        });
        WorkerProc {
            name: name.to_owned(),
            proc: Proc::Piped {
                child,
                stdin,
                lines,
            },
            events: Vec::new(),
            killed: false,
            exited: None,
        }
    }

    pub(crate) fn java(name: &str, proc: JavaProc) -> WorkerProc {
        WorkerProc {
            name: name.to_owned(),
            proc: Proc::Java(proc),
            events: Vec::new(),
            killed: false,
            exited: None,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        match &self.proc {
            Proc::Piped { child, .. } => child.id(),
            Proc::Java(j) => j.pid(),
        }
    }

    pub(crate) fn is_java(&self) -> bool {
        matches!(self.proc, Proc::Java(_))
    }

    /// Whether `worker` (a register's worker name) is one of this process's slots.
    pub(crate) fn owns(&self, worker: &str) -> bool {
        worker == self.name
            || worker
                .strip_prefix(&self.name)
                .is_some_and(|rest| rest.starts_with('.'))
    }

    pub(crate) fn pump(&mut self) {
        match &mut self.proc {
            Proc::Piped { lines, .. } => self.events.extend(lines.try_iter()),
            Proc::Java(j) => {
                while let Some(line) = j.next_line(Duration::ZERO) {
                    if let Some(at) = line.find(MARK) {
                        self.events.push(line[at + MARK.len()..].to_owned());
                    }
                }
            }
        }
    }

    pub(crate) fn count(&mut self, verb: &str) -> usize {
        self.pump();
        self.events
            .iter()
            .filter(|e| e.split(' ').next() == Some(verb))
            .count()
    }

    /// Every session any slot has had, and the current one per slot.
    pub(crate) fn sessions(&mut self) -> (BTreeSet<i64>, BTreeMap<String, i64>) {
        self.pump();
        let (mut all, mut current) = (BTreeSet::new(), BTreeMap::new());
        for e in &self.events {
            let p: Vec<&str> = e.split(' ').collect();
            if (p[0] == "ready" || p[0] == "session") && p.len() == 3 {
                if let Ok(s) = u64::from_str_radix(p[2], 16) {
                    all.insert(s as i64);
                    current.insert(p[1].to_owned(), s as i64);
                }
            }
        }
        (all, current)
    }

    pub(crate) fn stats(&mut self) -> BTreeMap<String, SlotStats> {
        self.pump();
        self.events
            .iter()
            .filter_map(|e| e.strip_prefix("stats "))
            .filter_map(|rest| rest.split_once(' '))
            .map(|(name, kv)| (name.to_owned(), SlotStats::parse(kv)))
            .collect()
    }

    /// Sends `sig` (`-STOP`, `-CONT`, `-KILL`) while it runs (never to a reaped, reusable pid).
    pub(crate) fn signal(&mut self, sig: &str) {
        if self.has_exited() {
            return;
        }
        let _ = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status();
    }

    pub(crate) fn has_exited(&mut self) -> bool {
        match &mut self.proc {
            Proc::Piped { child, .. } => {
                if let Ok(Some(status)) = child.try_wait() {
                    self.exited = Some(status.success());
                }
            }
            Proc::Java(j) => {
                if let Some(status) = j.status() {
                    self.exited = Some(status.success());
                }
            }
        }
        self.exited.is_some()
    }

    pub(crate) fn send_stop(&mut self) {
        self.send("stop");
    }

    /// Sends a command line (`stop`; `dump` to a zklock worker) while it runs.
    pub(crate) fn send(&mut self, command: &str) {
        if self.killed {
            return;
        }
        match &mut self.proc {
            Proc::Piped { stdin, .. } => {
                if let Some(s) = stdin.as_mut() {
                    let _ = writeln!(s, "{command}").and_then(|_| s.flush());
                }
            }
            Proc::Java(j) => {
                if j.status().is_none() {
                    j.send(command);
                }
            }
        }
    }

    /// Kills it if it is still running; whether it had exited cleanly by itself.
    pub(crate) fn reap(&mut self) -> bool {
        let clean = self.has_exited() && self.exited == Some(true);
        if let Proc::Piped { child, stdin, .. } = &mut self.proc {
            stdin.take();
            let _ = child.kill();
            let _ = child.wait();
        }
        // A JavaProc kills and reaps on drop.
        self.pump();
        clean
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        self.signal("-CONT");
        if let Proc::Piped { child, .. } = &mut self.proc {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
