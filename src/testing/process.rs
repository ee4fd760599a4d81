//! Starting JVMs from one spawner thread (with a parent-death signal, so none outlives the test
//! process) and signalling them.

use std::fs;
use std::io;
use std::process::{Child, Command};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::thread;

pub(super) struct SpawnRequest {
    cmd: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// Spawns `cmd` on the process-global spawner thread.
///
/// Every JVM gets `PR_SET_PDEATHSIG = SIGKILL`. The kernel delivers it when
/// the *thread* that forked the child exits, so all forks happen on one
/// thread that lives as long as the process: when the test process exits or
/// dies, the kernel kills every JVM it started.
pub(super) fn spawn(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<Option<mpsc::Sender<SpawnRequest>>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let started = thread::Builder::new()
            .name("zklock-testing-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop never ends.
                for mut req in rx {
                    let _ = req.reply.send(spawn_with_parent_death_signal(&mut req.cmd));
                }
            });
        Mutex::new(started.ok().map(|_| tx))
    });
    let tx = lock(spawner)
        .clone()
        .ok_or_else(|| io::Error::other("cannot start the JVM spawner thread"))?;
    let (reply, result) = mpsc::channel();
    tx.send(SpawnRequest { cmd, reply })
        .map_err(|_| io::Error::other("the JVM spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the JVM spawner thread is gone"))?
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(super) fn spawn_with_parent_death_signal(cmd: &mut Command) -> io::Result<Child> {
    use rustix::process::{getppid, set_parent_process_death_signal, Pid, Signal};
    use std::os::unix::process::CommandExt;
    let parent = Pid::from_raw(std::process::id() as i32);
    // SAFETY: the closure runs in the forked child before `exec`; it only makes the
    // async-signal-safe syscalls prctl(2) and getppid(2), touches no lock and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl.
            if getppid() != parent {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        })
    };
    cmd.spawn()
}

#[cfg(not(target_os = "linux"))]
pub(super) fn spawn_with_parent_death_signal(cmd: &mut Command) -> io::Result<Child> {
    cmd.spawn()
}

/// Sends `sig` to `pid`, which must be one of our own children not yet reaped
/// (so that it cannot have been recycled for another process).
pub(super) fn signal(pid: u32, sig: rustix::process::Signal) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// Whether every thread of `pid` is in the stopped state (`T` in
/// `/proc/PID/task/TID/stat`). True where `/proc` cannot tell.
pub(super) fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            return true;
        };
        // "TID (comm) STATE ...": comm may contain spaces and parentheses.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        matches!(state, None | Some('T' | 't' | 'Z' | 'X'))
    })
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `cmd` to its end; an error with its status and output if it fails (`what` names it).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn run_to_end(cmd: &mut Command, what: &str) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}
