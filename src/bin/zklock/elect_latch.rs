//! `zklock elect` on every backend but ZooKeeper (whose `elect` is Curator's LeaderSelector):
//! the library's leader latch per term, the command run while it leads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, Receiver};
use zklock::{AnyLeaderLatch, LockHealth};

use crate::args::ElectArgs;
use crate::child::{catch_signals, status_code, Caught, Child, Outcome, Watchdog};
use crate::contender::Site;
use crate::{code, hostname, CliResult, Context, Failure};

/// `elect` on the backend `site` names: a leader latch per term.
pub fn elect(site: Site, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let node = (site.node)(&args.path);
    let result = elect_on_latch(&args, &signals, &node, site.lost, || {
        site.client.leader_latch(&args.path)
    });
    site.client.close();
    result
}

/// `elect` on a latch per term from `start`: the command runs while it leads, with
/// `ZKLOCK_NODE` set to `node`; with `--requeue`, a new latch queues after each term.
fn elect_on_latch(
    args: &ElectArgs,
    signals: &Receiver<Caught>,
    node: &str,
    lost: &str,
    start: impl Fn() -> zklock::Result<AnyLeaderLatch>,
) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let result = loop {
        let latch = start()
            .context(|| format!("cannot take part in the election on {}", args.path))
            .map_err(failed)?;
        // Until elected a signal ends zklock (leaving the queue).
        let elected = loop {
            if let Ok(sig) = signals.try_recv() {
                break Err((128 + sig.signal) as u8);
            }
            match latch.await_leadership_timeout(Duration::from_millis(100)) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => {
                    return Err(failed(Failure::from_error("the election ended", &e)));
                }
            }
        };
        if let Err(code) = elected {
            latch.close();
            break Ok(code);
        }
        let token = latch.epoch().unwrap_or_default();
        eprintln!("zklock: leading {} as {id:?} (epoch {token})", args.path);
        let env = [
            ("ZKLOCK_FENCING_TOKEN", token.to_string()),
            ("ZKLOCK_NODE", node.to_owned()),
            ("ZKLOCK_LEADER_ID", id.clone()),
        ];
        let mut child = match Child::spawn(&args.command, &env, !args.foreground) {
            Ok(child) => child,
            Err(f) => {
                latch.close();
                break Err(f);
            }
        };
        let health = || latch.health().unwrap_or(LockHealth::Lost);
        let (forward, forwarded) = crossbeam_channel::unbounded();
        let relay = signals.clone();
        let watchdog = Watchdog {
            health: &health,
            lost,
            cancelled: &|| false,
            signals: forwarded,
            revoked: never(),
            suspended_grace: args.suspended_grace,
            kill_after: args.kill_after,
            max_hold: None,
        };
        // Signals for zklock go to the command, and end the election after its term.
        let stopping = Arc::new(AtomicBool::new(false));
        let (done, term_over) = crossbeam_channel::bounded::<()>(0);
        let relaying = {
            let stopping = stopping.clone();
            std::thread::spawn(move || loop {
                crossbeam_channel::select! {
                    recv(relay) -> sig => {
                        let Ok(sig) = sig else { break };
                        stopping.store(true, Ordering::SeqCst);
                        if forward.send(sig).is_err() {
                            break;
                        }
                    }
                    recv(term_over) -> _ => break,
                }
            })
        };
        let code = match watchdog.supervise(&mut child) {
            Outcome::Exited(status) => status_code(status),
            Outcome::Lost => code::LOST,
        };
        drop(done);
        let _ = relaying.join();
        latch.close();
        if !args.requeue || stopping.load(Ordering::SeqCst) {
            break Ok(code);
        }
        eprintln!("zklock: the term ended (exit code {code}); queueing again");
    };
    result
}
