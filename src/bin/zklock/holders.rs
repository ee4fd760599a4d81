//! `holders` and `watch`: a lock path's queue in lock order, for every Curator layout.
//!
//! The order is Curator's: contenders sort by the sequence after the lock name (the library's
//! `StandardDriver` sort key, which survives the signed 32-bit wrap); read-write nodes sort
//! together, a downgrading writer's read node (`__READ__<writer seq><seq>`) right behind its
//! writer. Who holds: the first node of a mutex or latch; for a read-write lock, every reader
//! with no writer ahead of it (and the head writer's downgrade read) and the writer at the head;
//! for a semaphore, the first `max_leases` leases.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zklock::zookeeper::Watch;
use zklock::{Client, Error, LockDriver, StandardDriver};

use crate::args::{Global, HoldersArgs};
use crate::listing::{Entry as ListingEntry, Listing};
use crate::{connect, CliResult, Context};

const READ: &str = "__READ__";
const WRITE: &str = "__WRIT__";

/// What a lock node is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// InterProcessMutex, LeaderSelector, a semaphore's internal lock.
    Lock,
    Read,
    Write,
    Lease,
    Latch,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Lease => "lease",
            Kind::Latch => "latch",
        }
    }

    fn lock_name(self) -> &'static str {
        match self {
            Kind::Lock => "lock-",
            Kind::Read => READ,
            Kind::Write => WRITE,
            Kind::Lease => "lease-",
            Kind::Latch => "latch-",
        }
    }
}

/// The kind of a node named as one of Curator's lock layouts: an optional protection prefix
/// (`_c_<uuid>-`), the lock name, then a sequence (`-` allowed past the signed wrap; a
/// downgrade read node carries two).
pub fn kind_of(name: &str) -> Option<Kind> {
    let body = strip_protection(name);
    [
        Kind::Write,
        Kind::Read,
        Kind::Lease,
        Kind::Latch,
        Kind::Lock,
    ]
    .into_iter()
    .find(|k| {
        body.strip_prefix(k.lock_name()).is_some_and(|digits| {
            digits.len() >= 10
                && digits.chars().all(|c| c.is_ascii_digit() || c == '-')
                && digits.chars().any(|c| c.is_ascii_digit())
        })
    })
}

fn strip_protection(name: &str) -> &str {
    match name.strip_prefix("_c_") {
        Some(rest) if rest.len() > 37 && rest.as_bytes()[36] == b'-' => &rest[37..],
        _ => name,
    }
}

/// One contender.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: Kind,
    /// Full path.
    pub node: String,
    pub session: i64,
    pub age: Duration,
    pub data: String,
    /// The node's czxid: the fencing token of its hold.
    pub token: i64,
    /// Whether it holds now (`None`: cannot tell, a semaphore without `--max-leases`).
    pub holds: Option<bool>,
}

/// A lock path's queue.
#[derive(Debug, Clone)]
pub struct View {
    pub path: String,
    pub layout: &'static str,
    pub entries: Vec<Entry>,
}

fn children_or_none(client: &Client, path: &str) -> zklock::Result<Vec<String>> {
    match client.children(path) {
        Err(Error::NoNode(_)) => Ok(Vec::new()),
        other => other,
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// Reads the queue of `path`.
pub fn view(client: &Client, path: &str, max_leases: Option<u32>) -> zklock::Result<View> {
    let children = children_or_none(client, path)?;
    let mut named: Vec<(Kind, String, String)> = Vec::new(); // kind, name, parent
    let layout;
    if children.iter().any(|c| c == "leases" || c == "locks")
        && !children.iter().any(|c| kind_of(c).is_some())
    {
        layout = "semaphore";
        for (sub, kind) in [("leases", Kind::Lease), ("locks", Kind::Lock)] {
            let parent = join(path, sub);
            let mut nodes: Vec<String> = children_or_none(client, &parent)?
                .into_iter()
                .filter(|c| kind_of(c) == Some(kind))
                .collect();
            nodes.sort_by_key(|n| StandardDriver.sort_key(n, kind.lock_name()));
            named.extend(nodes.into_iter().map(|n| (kind, n, parent.clone())));
        }
    } else {
        let mut nodes: Vec<(Kind, String)> = children
            .into_iter()
            .filter_map(|c| kind_of(&c).map(|k| (k, c)))
            .collect();
        if nodes
            .iter()
            .any(|(k, _)| matches!(k, Kind::Read | Kind::Write))
        {
            layout = "read-write";
            nodes.retain(|(k, _)| matches!(k, Kind::Read | Kind::Write));
            nodes.sort_by_key(|(_, n)| rw_sort_key(n));
        } else if nodes.iter().any(|(k, _)| *k == Kind::Lock) {
            layout = "mutex";
            nodes.retain(|(k, _)| *k == Kind::Lock);
            nodes.sort_by_key(|(_, n)| StandardDriver.sort_key(n, "lock-"));
        } else {
            layout = if nodes.is_empty() { "empty" } else { "latch" };
            nodes.sort_by_key(|(_, n)| StandardDriver.sort_key(n, "latch-"));
        }
        named.extend(nodes.into_iter().map(|(k, n)| (k, n, path.to_owned())));
    }
    let holds = holds_now(layout, &named, max_leases);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut entries = Vec::new();
    for ((kind, name, parent), holds) in named.into_iter().zip(holds) {
        let node = join(&parent, &name);
        let (data, stat) = match client.data(&node) {
            Ok(found) => found,
            Err(Error::NoNode(_)) => continue, // gone since the listing
            Err(e) => return Err(e),
        };
        entries.push(Entry {
            kind,
            node,
            session: stat.ephemeral_owner,
            age: Duration::from_millis(now.saturating_sub(stat.ctime).max(0) as u64),
            data: String::from_utf8_lossy(&data).into_owned(),
            token: stat.czxid,
            holds,
        });
    }
    Ok(View {
        path: path.to_owned(),
        layout,
        entries,
    })
}

/// Who holds, by the recipes' predicates (see the module's documentation).
fn holds_now(
    layout: &str,
    nodes: &[(Kind, String, String)],
    max_leases: Option<u32>,
) -> Vec<Option<bool>> {
    let mut first_lock = true;
    let mut leases = 0u32;
    let mut writer_ahead = false;
    let mut head_writer: Option<String> = None;
    nodes
        .iter()
        .enumerate()
        .map(|(i, (kind, name, _))| match (layout, kind) {
            ("semaphore", Kind::Lease) => max_leases.map(|max| {
                leases += 1;
                leases <= max
            }),
            // A semaphore's internal lock: its nodes wait for a lease.
            ("semaphore", _) => Some(false),
            (_, Kind::Write) => {
                if i == 0 {
                    head_writer = writer_seq(name).map(str::to_owned);
                }
                writer_ahead = true;
                Some(i == 0)
            }
            (_, Kind::Read) => Some(
                !writer_ahead
                    || (head_writer.is_some() && downgraded_from(name) == head_writer.as_deref()),
            ),
            _ => Some(std::mem::replace(&mut first_lock, false)),
        })
        .collect()
}

fn writer_seq(name: &str) -> Option<&str> {
    name.rfind(WRITE).map(|i| &name[i + WRITE.len()..])
}

/// The writer sequence a downgrade read node (`__READ__<writer seq><seq>`) carries.
fn downgraded_from(name: &str) -> Option<&str> {
    let digits = &name[name.rfind(READ)? + READ.len()..];
    let first = if digits.starts_with('-') { 11 } else { 10 };
    digits.get(first..).filter(|own| !own.is_empty())?;
    digits.get(..first)
}

/// Readers and writers sort together by sequence; a downgrade read node sorts right behind its
/// writer (the library's read-write order, as Curator 5.5's string sort gives).
fn rw_sort_key(node: &str) -> u64 {
    let (name, digits) = match node.rfind(WRITE) {
        Some(i) => (WRITE, &node[i + WRITE.len()..]),
        None => match node.rfind(READ) {
            Some(i) => (READ, &node[i + READ.len()..]),
            None => return u64::MAX,
        },
    };
    let first = if digits.starts_with('-') { 11 } else { 10 };
    let seq = |d: &str| StandardDriver.sort_key(&format!("{name}{d}"), name);
    match digits.get(first..) {
        Some(own) if !own.is_empty() && name == READ => {
            let own = seq(own).saturating_add(1).min(u64::from(u32::MAX));
            (seq(&digits[..first]) << 32) | own
        }
        _ => seq(digits).saturating_mul(1 << 32),
    }
}

pub fn session_hex(session: i64) -> String {
    format!("0x{:x}", session as u64)
}

/// The view as the listing every backend prints.
pub fn listing(view: &View) -> Listing {
    let entries = view
        .entries
        .iter()
        .map(|e| ListingEntry {
            kind: e.kind.name().to_owned(),
            holds: e.holds,
            id: e.node.clone(),
            owner: Some(e.data.clone()),
            session: Some(session_hex(e.session)),
            token: u64::try_from(e.token).ok(),
            age: Some(e.age),
            expires_in: None,
        })
        .collect();
    Listing {
        backend: "zookeeper",
        name: view.path.clone(),
        layout: view.layout,
        entries,
    }
}

/// The listing of `path` on `client`.
pub fn read(client: &Client, path: &str, max_leases: Option<u32>) -> CliResult<Listing> {
    let view = view(client, path, max_leases).context(|| format!("cannot read {path}"))?;
    Ok(listing(&view))
}

pub fn holders(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let client = connect(global)?;
    let listing = read(&client, &args.path, args.max_leases);
    client.close();
    listing?.print(args.json);
    Ok(())
}

/// Watches whatever a change of the view fires: the children of the path (or, while it does
/// not exist, of its nearest existing ancestor), a semaphore's two sub-paths, and every node's
/// data (a revocation request, a node going).
fn watches(client: &Client, view: &View) -> zklock::Result<Vec<Watch>> {
    let mut out = Vec::new();
    let mut path = view.path.clone();
    loop {
        match client.children_watch(&path) {
            Ok((_, w)) => {
                out.push(w);
                break;
            }
            Err(Error::NoNode(_)) if path != "/" => {
                path = match path.rfind('/') {
                    Some(0) | None => "/".to_owned(),
                    Some(i) => path[..i].to_owned(),
                };
            }
            Err(e) => return Err(e),
        }
    }
    if view.layout == "semaphore" {
        for sub in ["leases", "locks"] {
            match client.children_watch(&join(&view.path, sub)) {
                Ok((_, w)) => out.push(w),
                Err(Error::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    for e in &view.entries {
        match client.data_watch(&e.node) {
            Ok((_, _, w)) => out.push(w),
            Err(Error::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// `watch` on ZooKeeper: read again when one of the view's watches fires or the connection
/// changes.
pub fn watch(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let client = connect(global)?;
    let states = client.connection_states();
    let path = args.path.clone();
    let read_now = || {
        // Watches first, then the view: a change between the two is seen now or fires later.
        let pre =
            view(&client, &path, args.max_leases).context(|| format!("cannot read {path}"))?;
        let ws = watches(&client, &pre).context(|| format!("cannot watch {path}"))?;
        Ok((ws, read(&client, &path, args.max_leases)?))
    };
    let armed = std::cell::RefCell::new(Vec::new());
    let result = crate::listing::watch(
        || {
            let (ws, listing) = read_now()?;
            *armed.borrow_mut() = ws;
            Ok(listing)
        },
        |_| {
            // Until one of the watches fires or the connection changes: the server tells us,
            // the loop only looks at what it delivered (zklock's channels do not join a
            // select).
            loop {
                if armed.borrow().iter().any(|w| w.try_event().is_some()) {
                    break;
                }
                match states.recv_timeout(Duration::from_millis(20)) {
                    Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                }
            }
            Ok(!client.is_closed())
        },
        args.json,
    );
    client.close();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> Vec<(Kind, String, String)> {
        names
            .iter()
            .map(|n| (kind_of(n).unwrap(), n.to_string(), "/p".to_owned()))
            .collect()
    }

    #[test]
    fn known_layouts_only() {
        let id = "_c_0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-";
        assert_eq!(kind_of(&format!("{id}lock-0000000001")), Some(Kind::Lock));
        assert_eq!(kind_of("lock-0000000001"), Some(Kind::Lock));
        assert_eq!(
            kind_of(&format!("{id}__READ__0000000001")),
            Some(Kind::Read)
        );
        assert_eq!(
            kind_of(&format!("{id}__READ__00000000030000000004")),
            Some(Kind::Read)
        );
        assert_eq!(
            kind_of(&format!("{id}__WRIT__0000000001")),
            Some(Kind::Write)
        );
        assert_eq!(kind_of(&format!("{id}lease-0000000001")), Some(Kind::Lease));
        assert_eq!(kind_of(&format!("{id}latch-0000000001")), Some(Kind::Latch));
        assert_eq!(kind_of("lock--2147483648"), Some(Kind::Lock));
        for foreign in [
            "config",
            "lock-",
            "lock-12",
            "leases",
            "locks",
            "x-lock-0000000001",
        ] {
            assert_eq!(kind_of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn read_write_order_and_holders() {
        let mut n = vec![
            "__READ__0000000005",
            "__WRIT__0000000003",
            "__READ__00000000030000000006",
            "__WRIT__0000000004",
        ];
        n.sort_by_key(|x| rw_sort_key(x));
        assert_eq!(
            n,
            [
                "__WRIT__0000000003",
                "__READ__00000000030000000006",
                "__WRIT__0000000004",
                "__READ__0000000005",
            ]
        );
        let holds = holds_now("read-write", &nodes(&n), None);
        assert_eq!(holds, [Some(true), Some(true), Some(false), Some(false)]);
        // Readers ahead of the first writer all hold.
        let n = [
            "__READ__0000000001",
            "__READ__0000000002",
            "__WRIT__0000000003",
        ];
        assert_eq!(
            holds_now("read-write", &nodes(&n), None),
            [Some(true), Some(true), Some(false)]
        );
    }

    #[test]
    fn semaphore_holders_need_max_leases() {
        let n = ["lease-0000000001", "lease-0000000002", "lease-0000000003"];
        assert_eq!(
            holds_now("semaphore", &nodes(&n), Some(2)),
            [Some(true), Some(true), Some(false)]
        );
        assert_eq!(holds_now("semaphore", &nodes(&n), None), [None, None, None]);
        let n = ["lock-0000000007", "lock-0000000008"];
        assert_eq!(
            holds_now("mutex", &nodes(&n), None),
            [Some(true), Some(false)]
        );
    }
}
