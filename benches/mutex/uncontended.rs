//! 1. Uncontended acquire + release, beside the floor.

use super::*;

/// A timed row: latencies, counters and the caller's own CPU.
pub(crate) struct Timed {
    pub(crate) samples: Histogram<u64>,
    pub(crate) per: PerOp,
}

/// Warms `op` up, then times `plan.iterations` of it on this thread.
pub(crate) fn timed(zk: &Zk, plan: &Plan, mut op: impl FnMut() -> Res<()>) -> Res<Timed> {
    for _ in 0..plan.warmup {
        op()?;
    }
    let before = zk.mntr();
    let cpu = thread_cpu();
    let mut samples = histogram();
    for _ in 0..plan.iterations {
        let t = Instant::now();
        op()?;
        record(&mut samples, t.elapsed());
    }
    let cpu = thread_cpu() - cpu;
    // A lock hold's keeper getData runs in the background: let it land.
    thread::sleep(Duration::from_millis(100));
    let after = zk.mntr();
    Ok(Timed {
        samples,
        per: PerOp(before.zip(after), plan.iterations, Some(cpu)),
    })
}

pub(crate) fn uncontended(zk: &Zk, root: &str, label: &str, plan: &Plan) -> Res<()> {
    // The floor: the same protocol on zookeeper-client, on this thread.
    let dir = format!("{root}/floor-uncontended");
    let floor = floor::with_session(&zk.connect, |wire| async move {
        floor::mkdirs(&wire, &dir).await?;
        let cycle = || async {
            let node = floor::acquire(&wire, &dir).await?;
            floor::release(&wire, &node).await
        };
        for _ in 0..plan.warmup {
            cycle().await?;
        }
        let before = zk.mntr();
        let cpu = thread_cpu();
        let mut samples = histogram();
        for _ in 0..plan.iterations {
            let t = Instant::now();
            cycle().await?;
            record(&mut samples, t.elapsed());
        }
        let cpu = thread_cpu() - cpu;
        let after = zk.mntr();
        Ok(Timed {
            samples,
            per: PerOp(before.zip(after), plan.iterations, Some(cpu)),
        })
    })?;

    let client = zk.client()?;
    // The socket floor: the same three requests without any wire library.
    let socket_dir = format!("{root}/socket-floor");
    match client.create(&socket_dir).parents_as_containers().call() {
        Ok(_) | Err(zklock::Error::NodeExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let socket_prefix = format!("{socket_dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let socket_row = |mut session: socket::Session| {
        let row = timed(zk, plan, || {
            let node = session.create(&socket_prefix)?;
            if session.children(&socket_dir)?.is_empty() {
                return Err("the socket floor's listing missed its node".into());
            }
            session.delete(&node)
        })?;
        session.close()?;
        Res::Ok(row)
    };
    let bare = socket_row(socket::Session::open(&zk.connect, SESSION_TIMEOUT)?)?;
    let threaded = socket_row(socket::Session::open_threaded(
        &zk.connect,
        SESSION_TIMEOUT,
    )?)?;

    let raw_parent = format!("{root}/raw");
    let raw_prefix = format!("{raw_parent}/lock-");
    let raw = timed(zk, plan, || {
        let node = client
            .create(&raw_prefix)
            .mode(CreateMode::EphemeralSequential)
            .parents_as_containers()
            .protected()
            .call()?;
        let children = client.children(&raw_parent)?;
        assert!(!children.is_empty());
        client.delete(&node)?;
        Ok(())
    })?;
    let mutex = InterProcessMutex::new(&client, &format!("{root}/uncontended"))?;
    let lock = timed(zk, plan, || {
        mutex.acquire()?;
        mutex.release()?;
        Ok(())
    })?;
    client.close();

    println!(
        "## 1. uncontended{label}, one session, {} iterations after {} warm-up each",
        plan.iterations, plan.warmup
    );
    println!(
        "{:<72} {:>8} {:>8} {:>8} {COUNTER_HEAD}",
        "operation", "p50 ms", "p99 ms", "mean ms"
    );
    let rows = [
        (
            "floor: zookeeper-client, one thread: create, list, delete",
            &floor,
        ),
        (
            "socket floor: blocking TcpStream, no wire library: same 3 requests",
            &bare,
        ),
        (
            "threaded socket floor: the same, answers read by a session thread",
            &threaded,
        ),
        (
            "zklock Client, no recipe: create(protected, parents), children, delete",
            &raw,
        ),
        ("InterProcessMutex acquire + release", &lock),
    ];
    let mut p50s = Vec::new();
    for (name, row) in rows {
        let p50 = quantile_ms(&row.samples, 0.5);
        p50s.push(p50);
        println!(
            "{name:<72} {p50:>8.3} {:>8.3} {:>8.3} {}",
            quantile_ms(&row.samples, 0.99),
            row.samples.mean() / 1e3,
            row.per
        );
    }
    println!(
        "InterProcessMutex / floor: p50 {:.2}x, client CPU {}; socket floor / floor: p50 {:.2}x, \
         client CPU {}",
        p50s[4] / p50s[0],
        ratio(lock.per.cpu_ms(), floor.per.cpu_ms()),
        p50s[1] / p50s[0],
        ratio(bare.per.cpu_ms(), floor.per.cpu_ms())
    );
    keep_ratio(
        format!("uncontended{label}: zklock / floor p50"),
        Some(p50s[4] / p50s[0]),
    );
    keep_ratio(
        format!("uncontended{label}: socket floor client CPU ms/cycle"),
        bare.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: threaded socket floor client CPU ms/cycle"),
        threaded.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: floor client CPU ms/cycle"),
        floor.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: zklock client CPU ms/cycle"),
        lock.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: zklock / floor client CPU"),
        lock.per
            .cpu_ms()
            .zip(floor.per.cpu_ms())
            .map(|(a, b)| a / b),
    );
    println!();
    Ok(())
}
