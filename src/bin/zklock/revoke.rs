//! `revoke` and `break`: ask a holder to let go, or take its node away.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zklock::zookeeper::Stat;
use zklock::{Client, Error, Revoker};

use crate::args::{BreakArgs, Global, NodeArgs};
use crate::holders::{kind_of, session_hex, Kind};
use crate::listing::age;
use crate::{connect, CliResult, Context, Failure};

/// The node's kind by name, its data and stat; refuses a node of no known lock layout.
fn lock_node(client: &Client, node: &str) -> CliResult<(Kind, String, Stat)> {
    let name = node.rsplit('/').next().unwrap_or(node);
    let kind = kind_of(name).ok_or_else(|| {
        Failure::new(format!(
            "{node} is not a lock node (expected a Curator lock, read, write, lease or latch \
             node such as .../_c_<uuid>-lock-0000000001); refusing"
        ))
    })?;
    let (data, stat) = client.data(node).map_err(|e| match e {
        Error::NoNode(_) => Failure::new(format!("{node} does not exist")),
        e => Failure::from_error(&format!("cannot read {node}"), &e),
    })?;
    Ok((kind, String::from_utf8_lossy(&data).into_owned(), stat))
}

fn describe(node: &str, kind: Kind, data: &str, stat: &Stat) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let held_for = Duration::from_millis(now.saturating_sub(stat.ctime).max(0) as u64);
    format!(
        "{node}: {} node of session {}, data {:?}, created {} ago, fencing token {}",
        kind.name(),
        session_hex(stat.ephemeral_owner),
        data,
        age(held_for),
        stat.czxid
    )
}

pub fn revoke(global: &Global, args: NodeArgs) -> CliResult<()> {
    let client = connect(global)?;
    let (kind, data, stat) = lock_node(&client, &args.node)?;
    Revoker::attempt_revoke(&client, &args.node)
        .context(|| format!("cannot revoke {}", args.node))?;
    println!(
        "asked the holder to release: {}",
        describe(&args.node, kind, &data, &stat)
    );
    client.close();
    Ok(())
}

pub fn break_node(global: &Global, args: BreakArgs) -> CliResult<()> {
    let client = connect(global)?;
    let (kind, data, stat) = lock_node(&client, &args.node)?;
    if stat.ephemeral_owner == 0 {
        return Err(Failure::new(format!(
            "{} is not ephemeral, so no lock holder owns it; refusing",
            args.node
        )));
    }
    eprintln!("{}", describe(&args.node, kind, &data, &stat));
    if !args.yes {
        eprint!("Delete it? The holder will lose the lock. [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).unwrap_or(0) == 0 {
            eprintln!(); // end of input: no answer
        }
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err(Failure::new(format!(
                "not confirmed (use --yes to skip the question): {} left alone",
                args.node
            )));
        }
    }
    match client.delete(&args.node) {
        Ok(()) | Err(Error::NoNode(_)) => {}
        Err(e) => {
            return Err(Failure::from_error(
                &format!("cannot delete {}", args.node),
                &e,
            ))
        }
    }
    println!("deleted {}", args.node);
    client.close();
    Ok(())
}
