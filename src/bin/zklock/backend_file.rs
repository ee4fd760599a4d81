//! The file backend (`--connect file:///dir`) as the commands see it: the Client on the
//! directory, and `holders` from the lock's entry files. A flock(1) with fencing tokens, fair
//! waiting, `-n`, and the command stopped if the lock's entry is removed.

use std::sync::Arc;

use zklock::file::{FileMutex, FileParticipant, FileReadWriteLock, FileSemaphore};
use zklock::{AnyClient, FileClient};

use crate::args::Global;
use crate::contender::{refuse_zookeeper_options, Site};
use crate::listing::{Entry, Listing};
use crate::{CliResult, Context, Failure};

/// The Client on the directory `--connect file:///dir` names.
pub fn connect(global: &Global) -> CliResult<FileClient> {
    refuse_zookeeper_options(global, "file://", "no password: file permissions decide")?;
    let dir = global.connect.trim()["file://".len()..].to_owned();
    let dir = dir.strip_prefix("localhost").unwrap_or(&dir).to_owned();
    if !dir.starts_with('/') {
        return Err(Failure::usage(format!(
            "--connect {:?}: a file:// URL names an absolute directory, as file:///var/lock/app",
            global.connect
        )));
    }
    FileClient::open(&dir).context(|| format!("cannot open {dir}"))
}

/// The file backend, as the commands use it.
pub fn site(global: &Global) -> CliResult<Site> {
    let client = connect(global)?;
    let dirs = client.clone();
    let reader = client.clone();
    Ok(Site {
        client: AnyClient::from(client),
        node: Box::new(move |name| {
            FileMutex::new(&dirs, name)
                .map_or_else(|_| name.to_owned(), |m| m.dir().display().to_string())
        }),
        listing: Arc::new(move |name, max_leases| listing(&reader, name, max_leases)),
        lost: "its entry file or the lock's directory was removed",
    })
}

/// Every holder and waiter of the mutex (or latch), the read-write lock and the semaphore
/// named `name`: a directory of entries each. A semaphore's holders are told apart only with
/// `--max-leases`.
fn listing(client: &FileClient, name: &str, max_leases: Option<u32>) -> CliResult<Listing> {
    let read = || -> zklock::Result<Vec<Entry>> {
        let mut entries: Vec<Entry> = FileMutex::new(client, name)?
            .participants()?
            .into_iter()
            .map(|p| entry(p, true))
            .collect();
        let rw = FileReadWriteLock::new(client, name)?;
        entries.extend(
            rw.read_lock()
                .participants()?
                .into_iter()
                .map(|p| entry(p, true)),
        );
        let sem = FileSemaphore::new(client, name, max_leases.unwrap_or(1).max(1))?;
        let known = max_leases.is_some();
        entries.extend(sem.participants()?.into_iter().map(|p| entry(p, known)));
        Ok(entries)
    };
    let entries = read().context(|| format!("cannot read {name}"))?;
    Ok(Listing {
        backend: "file",
        name: name.to_owned(),
        layout: Listing::layout_of(&entries),
        entries,
    })
}

fn entry(p: FileParticipant, known: bool) -> Entry {
    Entry {
        kind: p.kind.to_owned(),
        holds: known.then_some(p.holds),
        id: p.id,
        owner: p.pid.map(|pid| format!("pid {pid}")),
        session: None,
        token: Some(p.token),
        age: p.age,
        expires_in: None,
    }
}
