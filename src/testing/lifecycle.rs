//! What the throwaway PostgreSQL, MariaDB and Redis servers share as child processes of the
//! test: waiting until a started server answers, waiting until a stopped one has exited, and
//! the tail of the server's log for an error's message.

use std::io;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// A server run as a child process of the test.
pub(super) trait ServerChild {
    /// The program's name in errors (`postgres`, `mariadbd`, `redis-server`).
    const PROGRAM: &'static str;

    /// The server's process, while it runs.
    fn child(&mut self) -> &mut Option<Child>;

    /// Whether the server answers now.
    fn answers(&self) -> bool;

    /// Kills the server (and whatever it started) with SIGKILL and reaps it.
    fn kill_server(&mut self) -> io::Result<()>;

    /// The server's log file.
    fn log_path(&self) -> PathBuf;

    /// The server's log, empty if it cannot be read.
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last 20 lines of the server's log.
    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits, asking every `poll`, until the server just started answers. An error with the
    /// log's tail if it exits first, or if it does not answer `within` (it is then killed;
    /// `late` says what it did not do: `did not answer`).
    fn wait_answering(&mut self, within: Duration, poll: Duration, late: &str) -> io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if self.answers() {
                return Ok(());
            }
            if let Some(status) = self
                .child()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                *self.child() = None;
                return Err(io::Error::other(format!(
                    "{} exited ({status}); its log:\n{}",
                    Self::PROGRAM,
                    self.log_tail()
                )));
            }
            if Instant::now() > deadline {
                let _ = self.kill_server();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} {late} within {} s; its log:\n{}",
                        Self::PROGRAM,
                        within.as_secs(),
                        self.log_tail()
                    ),
                ));
            }
            std::thread::sleep(poll);
        }
    }

    /// Waits until the server, told to stop, has exited and is reaped; if it has not `within`,
    /// kills it and says so.
    fn wait_exited(&mut self, within: Duration) -> io::Result<()> {
        let Some(mut child) = self.child().take() else {
            return Ok(());
        };
        let deadline = Instant::now() + within;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                *self.child() = Some(child);
                let _ = self.kill_server();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not stop within {} s and was killed",
                        Self::PROGRAM,
                        within.as_secs()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}
