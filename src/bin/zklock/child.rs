//! The command run under a lock: spawning it, forwarding signals, and stopping it when the lock
//! is lost.

use std::io::ErrorKind;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver};
use rustix::process::{kill_process, kill_process_group, test_kill_process_group, Pid, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use zklock::LockHealth;

use crate::{code, CliResult, Failure};

/// A signal zklock caught.
#[derive(Debug, Clone, Copy)]
pub struct Caught {
    pub signal: i32,
    /// Sent by the kernel, not by a process: a terminal's Ctrl-C or hangup, which went to the
    /// whole foreground process group, our command included; forwarding it would deliver it
    /// twice.
    pub by_terminal: bool,
}

/// SIGINT, SIGTERM and SIGHUP, delivered on a channel from now on (the process no longer dies
/// of them). Installed before the command is spawned, which gets the default dispositions.
pub fn catch_signals() -> CliResult<Receiver<Caught>> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Failure::from_error("cannot handle signals", &e))?;
    let (tx, rx) = crossbeam_channel::unbounded();
    thread::Builder::new()
        .name("zklock-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let caught = Caught {
                    signal: origin.signal,
                    by_terminal: matches!(origin.cause, Cause::Kernel),
                };
                if tx.send(caught).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Failure::from_error("cannot start the signal thread", &e))?;
    Ok(rx)
}

/// Has the kernel send the command SIGKILL when zklock dies, of SIGKILL too: the lock zklock
/// held is freed when it dies, so the command must not run on without it. Only the command
/// itself is killed; what it started in the background lives on (a shell script should `exec`
/// its last command). The signal comes when the thread that spawned the command ends, so the
/// command is spawned on a thread that outlives it (`main`, or the term that waits for it).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_zklock(command: &mut Command) {
    use rustix::process::{getpid, getppid, set_parent_process_death_signal};
    let zklock = getpid();
    let ask = move || -> std::io::Result<()> {
        set_parent_process_death_signal(Some(Signal::KILL))?;
        // zklock died before the request took: the command has already outlived it.
        if getppid() != Some(zklock) {
            return Err(rustix::io::Errno::SRCH.into());
        }
        Ok(())
    };
    // SAFETY: `ask` runs in the forked child before exec; it makes only the prctl and getppid
    // system calls (async-signal-safe) and allocates nothing on its success path.
    unsafe {
        command.pre_exec(ask);
    }
}

/// A running command.
pub struct Child {
    pid: u32,
    /// The command leads a process group of its own: signals go to the whole group, so that
    /// what it started stops with it.
    group: bool,
    exited: Receiver<ExitStatus>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Spawns `argv` with `env` added, in a process group of its own when `group`; its exit
    /// is reported on a channel.
    pub fn spawn(argv: &[String], env: &[(&str, String)], group: bool) -> CliResult<Child> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| Failure::new("no command given"))?;
        let mut command = Command::new(program);
        command.args(args);
        for (k, v) in env {
            command.env(k, v);
        }
        if group {
            command.process_group(0);
        }
        #[cfg(target_os = "linux")]
        die_with_zklock(&mut command);
        let mut child = command.spawn().map_err(|e| {
            let code = if e.kind() == ErrorKind::NotFound {
                code::NOT_FOUND
            } else {
                code::CANNOT_EXECUTE
            };
            Failure::from_error(&format!("cannot run {program:?}"), &e).with_code(code)
        })?;
        let pid = child.id();
        let (tx, exited) = crossbeam_channel::bounded(1);
        thread::Builder::new()
            .name("zklock-child".into())
            .spawn(move || {
                let status = child
                    .wait()
                    .unwrap_or_else(|_| ExitStatus::from_raw(255 << 8));
                let _ = tx.send(status);
            })
            .map_err(|e| Failure::from_error("cannot start the child thread", &e))?;
        Ok(Child {
            pid,
            group,
            exited,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `sig` to the command (to its whole group, if it leads one) unless it is known to
    /// have exited (then its pid may be reused).
    pub fn signal(&mut self, sig: i32) {
        if self.poll().is_some() {
            return;
        }
        self.send(sig);
    }

    fn send(&self, sig: i32) {
        if let (Some(pid), Some(sig)) =
            (Pid::from_raw(self.pid as i32), Signal::from_named_raw(sig))
        {
            let _ = if self.group {
                kill_process_group(pid, sig)
            } else {
                kill_process(pid, sig)
            };
        }
    }

    /// Whether a process of the command's group is still alive (it leads one).
    fn group_alive(&self) -> bool {
        self.group
            && Pid::from_raw(self.pid as i32)
                .is_some_and(|pid| test_kill_process_group(pid).is_ok())
    }

    pub fn signals_group(&self) -> bool {
        self.group
    }

    /// The exit status if it has exited.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.exited.try_recv().ok();
        }
        self.status
    }

    /// Waits up to `d` for the exit.
    fn wait_for(&mut self, d: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.exited.recv_timeout(d).ok();
        }
        self.status
    }

    /// SIGTERM, then SIGKILL if still running after `kill_after`; the exit status. With a
    /// group, what the command started gets the same: SIGTERM with it, SIGKILL if any of them
    /// is still there once the command has exited and `kill_after` has passed.
    pub fn terminate(&mut self, kill_after: Duration) -> ExitStatus {
        let since = Instant::now();
        self.signal(SIGTERM);
        if let Some(status) = self.wait_for(kill_after) {
            // Its group outlives it while anything it started runs: the group id is still
            // taken, so signalling it reaches no other process.
            while self.group_alive() && since.elapsed() < kill_after {
                thread::sleep(Duration::from_millis(20));
            }
            if self.group_alive() {
                eprintln!("zklock: processes the command started outlived SIGTERM: SIGKILL");
                self.send(rustix::process::Signal::KILL.as_raw());
            }
            return status;
        }
        eprintln!(
            "zklock: the command (pid {}) outlived SIGTERM by {:?}: SIGKILL",
            self.pid, kill_after
        );
        self.signal(rustix::process::Signal::KILL.as_raw());
        loop {
            if let Some(status) = self.wait_for(Duration::from_secs(3600)) {
                return status;
            }
        }
    }
}

/// A shell's exit code for a status: the code, or 128 + the signal that ended it.
pub fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        _ => code::ZKLOCK_FAILED,
    }
}

/// How supervision ended.
pub enum Outcome {
    /// The command exited by itself (or of a forwarded signal).
    Exited(ExitStatus),
    /// The lock was lost: the command was terminated.
    Lost,
}

/// What the supervisor watches besides the command.
pub struct Watchdog<'a> {
    /// The hold's health, computed now (detects a process that stood still past its session),
    /// every 100 ms.
    pub health: &'a dyn Fn() -> LockHealth,
    /// Why a `Lost` hold ended, in the backend's words.
    pub lost: &'a str,
    /// A cancelled term counts as lost (elect).
    pub cancelled: &'a dyn Fn() -> bool,
    /// Signals to forward to the command (unless they reached it from the terminal already).
    pub signals: Receiver<Caught>,
    /// Revocation requests: the command gets SIGTERM once.
    pub revoked: Receiver<()>,
    pub suspended_grace: Option<Duration>,
    pub kill_after: Duration,
    /// When the hold's `--max-hold` passes, and its length: the command is stopped then, as on
    /// a lost hold (the library lets go of the hold on the server at the same time).
    pub max_hold: Option<(Instant, Duration)>,
}

impl Watchdog<'_> {
    /// Runs until the command exits or the hold is lost.
    pub fn supervise(&self, child: &mut Child) -> Outcome {
        let mut suspended_since: Option<Instant> = None;
        let mut revoked = self.revoked.clone();
        loop {
            select! {
                recv(child.exited) -> status => {
                    let status = status.unwrap_or_else(|_| ExitStatus::from_raw(255 << 8));
                    child.status = Some(status);
                    return Outcome::Exited(status);
                }
                recv(self.signals) -> caught => {
                    // A terminal's signal reaches the command by itself only when it shares
                    // zklock's process group.
                    if let Ok(Caught { signal, by_terminal }) = caught {
                        if !by_terminal || child.signals_group() {
                            child.signal(signal);
                        }
                    }
                }
                recv(revoked) -> _ => {
                    eprintln!("zklock: revocation requested: stopping the command (SIGTERM)");
                    child.signal(SIGTERM);
                    revoked = never();
                }
                default(Duration::from_millis(100)) => {}
            }
            let health = (self.health)();
            // The library's cap counts from the grant inside the acquire, a moment before
            // `at`: a hold that reads Lost that close to its cap was taken away by it.
            let near = |at: Instant| Instant::now() + Duration::from_secs(1) >= at;
            let capped = self.max_hold.filter(|(at, _)| {
                Instant::now() >= *at || (health == LockHealth::Lost && near(*at))
            });
            let lost = match health {
                _ if (self.cancelled)() => Some("leadership ended".to_owned()),
                _ if capped.is_some() => {
                    let cap = capped.map(|(_, d)| d).unwrap_or_default();
                    Some(format!("held for its --max-hold of {cap:?}"))
                }
                LockHealth::Lost => Some(self.lost.to_owned()),
                LockHealth::Suspended => {
                    let since = *suspended_since.get_or_insert_with(Instant::now);
                    self.suspended_grace
                        .filter(|grace| since.elapsed() >= *grace)
                        .map(|grace| format!("connection suspended for more than {grace:?}"))
                }
                _ => {
                    suspended_since = None;
                    None
                }
            };
            if let Some(why) = lost {
                eprintln!(
                    "zklock: lock lost ({why}): stopping the command (pid {})",
                    child.pid()
                );
                let status = child.terminate(self.kill_after);
                eprintln!("zklock: the command ended: {status}");
                return Outcome::Lost;
            }
        }
    }
}
