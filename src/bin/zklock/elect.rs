//! `zklock elect`: run a command while this process leads (Curator's LeaderSelector).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, select};
use zklock::{ErrorPolicy, LeaderSelector};

use crate::args::{ElectArgs, Global};
use crate::child::{catch_signals, status_code, Child, Outcome, Watchdog};
use crate::{code, connect, hostname, CliResult, Context, Failure};

/// How a term ended.
enum TermEnd {
    Exited(u8),
    Lost,
    Failed(Failure),
    /// Elected while stopping: the command was not started.
    Skipped,
}

pub fn elect(global: &Global, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let client = connect(global).map_err(failed)?;
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let (ends_tx, ends) = crossbeam_channel::unbounded();
    let (forward_tx, forward_rx) = crossbeam_channel::unbounded();
    let stopping = Arc::new(AtomicBool::new(false));
    let selector = {
        let (command, path, stopping) = (args.command.clone(), args.path.clone(), stopping.clone());
        let (grace, kill_after, foreground) =
            (args.suspended_grace, args.kill_after, args.foreground);
        LeaderSelector::builder(&client, &args.path)
            .id(&id)
            .auto_requeue(args.requeue)
            // Suspended is judged here, with --suspended-grace; the selector ends a term on Lost.
            .error_policy(ErrorPolicy::SessionOnly)
            .build(move |leadership| {
                if stopping.load(Ordering::SeqCst) {
                    let _ = ends_tx.send(TermEnd::Skipped);
                    return Ok(());
                }
                // Signals meant for an earlier term's command are not for this one.
                while forward_rx.try_recv().is_ok() {}
                let token = leadership.fencing_token();
                eprintln!(
                    "zklock: leading {path} as {:?} (epoch {token})",
                    leadership.id()
                );
                let env = [
                    ("ZKLOCK_FENCING_TOKEN", token.to_string()),
                    ("ZKLOCK_NODE", leadership.node().to_owned()),
                    ("ZKLOCK_LEADER_ID", leadership.id().to_owned()),
                ];
                let mut child = match Child::spawn(&command, &env, !foreground) {
                    Ok(child) => child,
                    Err(f) => {
                        let _ = ends_tx.send(TermEnd::Failed(f));
                        return Ok(());
                    }
                };
                let health = || leadership.health();
                let cancelled = || leadership.is_cancelled();
                let watchdog = Watchdog {
                    health: &health,
                    lost: crate::ZOOKEEPER_LOST,
                    cancelled: &cancelled,
                    signals: forward_rx.clone(),
                    revoked: never(),
                    suspended_grace: grace,
                    kill_after,
                    max_hold: None,
                };
                let end = match watchdog.supervise(&mut child) {
                    Outcome::Exited(status) => TermEnd::Exited(status_code(status)),
                    Outcome::Lost => TermEnd::Lost,
                };
                let _ = ends_tx.send(end);
                Ok(())
            })
            .context(|| format!("cannot take part in the election on {}", args.path))
            .map_err(failed)?
    };
    selector
        .start()
        .context(|| format!("cannot take part in the election on {}", args.path))
        .map_err(failed)?;
    let linger = args.kill_after + Duration::from_secs(10);
    let mut caught: Option<i32> = None;
    let result = loop {
        select! {
            recv(signals) -> sig => {
                let Ok(sig) = sig else { continue };
                caught.get_or_insert(sig.signal);
                stopping.store(true, Ordering::SeqCst);
                if selector.has_leadership() {
                    // The command ends, then its term (below).
                    let _ = forward_tx.send(sig);
                } else {
                    let sig = sig.signal;
                    selector.close_timeout(linger);
                    break Ok((128 + sig) as u8);
                }
            }
            recv(ends) -> end => {
                let Ok(end) = end else { break Ok(code::ZKLOCK_FAILED) };
                let code = match end {
                    TermEnd::Failed(f) => {
                        selector.close_timeout(linger);
                        break Err(f);
                    }
                    TermEnd::Skipped => (128 + caught.unwrap_or(0)) as u8,
                    TermEnd::Exited(code) => code,
                    TermEnd::Lost => code::LOST,
                };
                if !args.requeue || stopping.load(Ordering::SeqCst) {
                    selector.close_timeout(linger);
                    break Ok(code);
                }
                eprintln!("zklock: the term ended (exit code {code}); queueing again");
            }
        }
    };
    client.close();
    result
}
