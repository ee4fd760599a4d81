//! A worker process: this test binary run again as one of its tests, which reads its arguments
//! from an environment variable and reports on its standard output in lines that start with
//! `worker: `. The test signals it (`kill -9`, SIGSTOP) and reads what it says.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use super::patience;

/// Says `line` to the test that started this worker.
pub fn say(line: &str) {
    println!("worker: {line}");
}

/// Blocks until the test ends the worker (its standard input closes).
pub fn wait_to_be_killed() {
    let _ = std::io::stdin().lock().lines().next();
}

pub struct Worker {
    pub child: Child,
    _stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    /// Runs the test named `test` of this binary with `args` in the environment variable `var`.
    pub fn start(test: &str, var: &str, args: &str) -> Worker {
        let mut cmd = Worker::command(test);
        cmd.env(var, args);
        Worker::spawn(cmd)
    }

    /// The command that runs the test named `test` of this binary, to set up before
    /// [`spawn`](Self::spawn).
    pub fn command(test: &str) -> Command {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", test, "--nocapture", "--test-threads", "1"]);
        cmd
    }

    /// Starts `cmd` (from [`command`](Self::command)) as a worker.
    pub fn spawn(mut cmd: Command) -> Worker {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("worker: ") {
                    let _ = tx.send(line[at + "worker: ".len()..].to_owned());
                }
            }
        });
        Worker {
            child,
            _stdin: stdin,
            lines,
        }
    }

    /// The worker's next line.
    pub fn next_line(&self) -> String {
        self.lines
            .recv_timeout(patience())
            .expect("the worker said nothing")
    }

    /// The rest of the worker's next line that starts with `prefix` (earlier lines skipped).
    pub fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + patience();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("the worker never said {prefix:?}"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }

    /// Writes `line` to the worker's standard input.
    pub fn tell(&mut self, line: &str) {
        writeln!(self._stdin, "{line}").expect("write to the worker");
    }

    /// `kill SIG PID` of the worker.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
