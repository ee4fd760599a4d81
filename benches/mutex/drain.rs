//! 3. Drain: Q queued waiters, released at once by the holder.

use super::*;

pub(crate) struct DrainRun {
    pub(crate) drain: Duration,
    /// Time per handoff of the first 10 % over that of the last 10 %.
    pub(crate) head_tail: f64,
    pub(crate) counters: PerOp,
    pub(crate) setup: Duration,
}

pub(crate) fn drain(
    zk: &Zk,
    root: &str,
    label: &str,
    hold: Duration,
    plan: &Plan,
    curator: Option<&Curator>,
) -> Res<()> {
    let holder_client = zk.client()?;
    let clients = (0..DRAIN_CLIENTS)
        .map(|_| zk.client())
        .collect::<Res<Vec<_>>>()?;
    println!("## 3. drain{label}, each waiter holding {hold:?}: holder takes the lock, Q waiter threads (each its own InterProcessMutex, sharing {DRAIN_CLIENTS} Clients round-robin, {} KiB stacks) queue; once all Q nodes and their watches are on the server the holder releases; drain = release until the last waiter has acquired and released; head/tail = time per handoff of the first 10 % over the last 10 %. {} run(s) per Q, median shown.", WAITER_STACK / 1024, plan.drain_runs);
    println!(
        "{:<8} {:>6} {:>10} {:>12} {:>9} {:>18} {:>8} {COUNTER_HEAD}",
        "", "Q", "drain ms", "per handoff", "head/tail", "runs ms", "setup s"
    );
    let mut per_handoff = Vec::new();
    for &q in plan.queues {
        let mut runs = Vec::new();
        for r in 0..plan.drain_runs {
            let path = format!("{root}/drain-{q}-{r}-{}", hold.as_millis());
            runs.push(drain_once(zk, &holder_client, &clients, &path, q, hold)?);
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].drain);
        let median = &runs[order[order.len() / 2]];
        let all = order
            .iter()
            .map(|&i| format!("{:.0}", ms(runs[i].drain)))
            .collect::<Vec<_>>()
            .join("/");
        let per = ms(median.drain) / q as f64;
        per_handoff.push((q, per, median.counters.bytes()));
        println!(
            "{:<8} {q:>6} {:>10.1} {:>12.3} {:>9.2} {all:>18} {:>8.1} {}",
            "zklock",
            ms(median.drain),
            per,
            median.head_tail,
            median.setup.as_secs_f64(),
            median.counters
        );
        if let Some(curator) = curator {
            let path = format!("{root}/drain-{q}-{}-curator", hold.as_millis());
            let (drain, head_tail, counters) = curator.drain(zk, &path, q, DRAIN_CLIENTS, hold)?;
            println!(
                "{:<8} {q:>6} {:>10.1} {:>12.3} {head_tail:>9.2} {:>18} {:>8} {}",
                "Curator",
                ms(drain),
                ms(drain) / q as f64,
                "-",
                "-",
                PerOp(counters, q, None)
            );
            println!(
                "{:<15} zklock / Curator drain time: {:.2}x",
                "",
                median.drain.as_secs_f64() / drain.as_secs_f64()
            );
        }
    }
    let (q0, first, first_bytes) = per_handoff[0];
    let (qn, lastc, last_bytes) = per_handoff[per_handoff.len() - 1];
    println!(
        "per-handoff time  Q={qn} / Q={q0}: {:.2}x (flat ~1x: O(n) drain)",
        lastc / first
    );
    if let (Some(a), Some(b)) = (first_bytes, last_bytes) {
        println!(
            "server bytes per handoff Q={qn} / Q={q0}: {:.1}x (flat: no handoff re-reads the queue; \
             growing ~linearly with Q ({}x here): each handoff re-lists the remaining queue, O(n^2) bytes in all)",
            b / a,
            qn / q0
        );
    }
    println!();
    holder_client.close();
    for c in clients {
        c.close();
    }
    Ok(())
}

/// Waits until `q` watches are on the server (every waiter parked), if it answers `wchs`.
pub(crate) fn await_watches(zk: &Zk, q: usize) -> Res<()> {
    let since = Instant::now();
    if zk.watches().is_some() {
        while zk.watches().unwrap_or(u64::MAX) < q as u64 {
            if since.elapsed() > STALL {
                return Err(format!("watches not set after {STALL:?}").into());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    thread::sleep(Duration::from_millis(50));
    Ok(())
}

pub(crate) fn drain_once(
    zk: &Zk,
    holder_client: &Client,
    clients: &[Client],
    path: &str,
    q: usize,
    hold: Duration,
) -> Res<DrainRun> {
    let setup_start = Instant::now();
    let holder = InterProcessMutex::new(holder_client, path)?;
    holder.acquire()?;

    let (tx, rx) = mpsc::channel::<Res<Instant>>();
    let mut handles = Vec::with_capacity(q);
    for i in 0..q {
        let (client, path, tx) = (
            clients[i % clients.len()].clone(),
            path.to_owned(),
            tx.clone(),
        );
        let h = thread::Builder::new()
            .name(format!("waiter-{i}"))
            .stack_size(WAITER_STACK)
            .spawn(move || {
                let result = (|| -> Res<Instant> {
                    let mutex = InterProcessMutex::new(&client, &path)?;
                    mutex.acquire()?;
                    if !hold.is_zero() {
                        thread::sleep(hold);
                    }
                    mutex.release()?;
                    Ok(Instant::now())
                })();
                let _ = tx.send(result);
            })?;
        handles.push(h);
    }
    drop(tx);

    // All Q waiters' nodes under the lock path, besides the holder's ...
    let waited = Instant::now();
    loop {
        let n = holder_client.children(path)?.len();
        if n == q + 1 {
            break;
        }
        if waited.elapsed() > STALL {
            return Err(format!("only {n} of {} nodes after {STALL:?}", q + 1).into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    // ... and every waiter parked on its watch (Q getData watches + the holder's keeper).
    await_watches(zk, q)?;
    let setup = setup_start.elapsed();

    let before = zk.mntr();
    let start = Instant::now();
    holder.release()?;
    let mut done = Vec::with_capacity(q);
    for _ in 0..q {
        done.push(
            rx.recv_timeout(STALL)
                .map_err(|_| format!("drain of {q} stalled for {STALL:?}"))??,
        );
    }
    done.sort();
    let drain = done[q - 1] - start;
    let k = (q / 10).max(1);
    let head = done[k - 1] - start;
    let tail = done[q - 1] - if q > k { done[q - 1 - k] } else { start };
    // The last holder's keeper getData runs in the background: let it land.
    thread::sleep(Duration::from_millis(50));
    let after = zk.mntr();
    for h in handles {
        h.join().map_err(|_| "waiter panicked")?;
    }
    Ok(DrainRun {
        drain,
        head_tail: head.as_secs_f64() / tail.as_secs_f64(),
        counters: PerOp(before.zip(after), q, None),
        setup,
    })
}
