//! Curator's lock algorithm on one directory of a local filesystem: each attempt is a
//! sequentially numbered entry file held under an operating-system lock for the attempt's life;
//! the lowest live entries hold; a waiter watches one entry ahead of it; an entry whose
//! operating-system lock is free belongs to a dead process and is removed by whoever finds it.
//!
//! Layout of a lock's directory:
//! * `state`: the sequence counter (decimal text), written and synced under an exclusive
//!   operating-system lock on the file itself. The sequence number of an entry is its fencing
//!   token: the counter never goes back, across crashes and reboots.
//! * `NNNNNNNNNNNNNNNNNNNN-KIND`: one attempt (twenty digits, then `lock`, `read`, `write` or
//!   `lease`), holding the owner's process id as text. It is made as a `tmp-…` file, locked,
//!   then renamed to its number under the `state` lock: a numbered entry is locked from the
//!   moment it can be seen, and entries appear in the order of their numbers.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};

/// The shortest pause of a waiter between two looks at the entry it waits for.
const FIRST_PAUSE: Duration = Duration::from_micros(10);

/// The longest pause of a waiter between two looks: the most a hand-off (or a cancellation,
/// or a close) waits for the waiter to notice it.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(1);

/// How many numbers are given per sync of the counter (where the boot can be told).
const RESERVE: u64 = 1024;

/// This boot's id (Linux's `/proc/sys/kernel/random/boot_id`); `None` elsewhere.
fn boot_id() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| id.to_owned())
    })
    .as_deref()
}

/// How old a `tmp-…` file is before a sweep may remove it: a maker numbers its file within
/// microseconds, or within its own deadline when the `state` file is busy.
const TMP_AGE: Duration = Duration::from_secs(600);

/// The longest pause of a process waiting for the `state` file's lock.
const STATE_PAUSE: Duration = Duration::from_micros(20);

/// What an entry is for: the suffix of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A mutex's or a leader latch's attempt.
    Lock,
    /// A read-write lock's reader.
    Read,
    /// A read-write lock's writer.
    Write,
    /// A semaphore's lease.
    Lease,
}

impl Kind {
    /// The suffix of its entries' names.
    pub(crate) fn name(self) -> &'static str {
        self.suffix()
    }

    fn suffix(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Lease => "lease",
        }
    }

    fn parse(suffix: &str) -> Option<Kind> {
        Some(match suffix {
            "lock" => Kind::Lock,
            "read" => Kind::Read,
            "write" => Kind::Write,
            "lease" => Kind::Lease,
            _ => return None,
        })
    }
}

/// One numbered entry as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) seq: u64,
    pub(crate) kind: Kind,
    pub(crate) name: String,
}

/// The file's identity (device, inode) where the platform has one: a file removed and made
/// again under the same name has another.
pub(crate) type Ident = Option<(u64, u64)>;

#[cfg(unix)]
fn ident_of(m: &fs::Metadata) -> Ident {
    use std::os::unix::fs::MetadataExt;
    Some((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn ident_of(_: &fs::Metadata) -> Ident {
    None
}

/// The identity of what `path` names now; `None` inside when it is gone.
pub(crate) fn ident_at(path: &Path) -> Option<Ident> {
    fs::symlink_metadata(path).ok().map(|m| ident_of(&m))
}

/// A lock's directory.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) dir: PathBuf,
}

/// Our entry: its file (holding its operating-system lock) and name. Dropping it removes the
/// entry, then closes the file (which frees the lock): nothing is left behind on any path out.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) file: Option<File>,
    pub(crate) path: PathBuf,
    pub(crate) seq: u64,
    pub(crate) ident: Ident,
}

impl Entry {
    /// Removes the entry and frees its lock (idempotent).
    pub(crate) fn remove(&mut self) {
        if let Some(file) = self.file.take() {
            if let Err(e) = fs::remove_file(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("zklock: removing {}: {e}", self.path.display());
                }
            }
            drop(file);
        }
    }

    /// The entry's name in its directory.
    pub(crate) fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.remove();
    }
}

/// How a waiter knows it should stop: cancelled (a generation moved on) or closed.
pub(crate) struct Stop<'a> {
    pub(crate) cancel: &'a AtomicU64,
    pub(crate) generation: u64,
    pub(crate) closed: &'a dyn Fn() -> bool,
}

impl Stop<'_> {
    pub(crate) fn check(&self) -> Result<()> {
        if (self.closed)() {
            return Err(Error::Closed);
        }
        if self.cancel.load(Ordering::Acquire) != self.generation {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}

/// What the lock's rule says of our place in the listing.
pub(crate) enum Verdict {
    /// Ours now.
    Granted,
    /// Wait for this entry (by name) to go.
    WaitFor(String),
    /// Wait for any change (look again after a pause).
    Look,
}

/// An I/O error, with what was being done.
pub(crate) fn io(context: impl std::fmt::Display, e: &std::io::Error) -> Error {
    Error::Io {
        context: context.to_string(),
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// Tries `f` until it succeeds, the stop says so, or the deadline passes (`None`); pauses grow
/// from [`FIRST_PAUSE`] to [`MAX_PAUSE`].
fn until_done<T>(
    deadline: Deadline,
    stop: &Stop<'_>,
    f: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    until_done_every(MAX_PAUSE, deadline, stop, f)
}

/// As [`until_done`], the pauses growing to `max_pause`.
fn until_done_every<T>(
    max_pause: Duration,
    deadline: Deadline,
    stop: &Stop<'_>,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let mut pause = FIRST_PAUSE.min(max_pause);
    loop {
        stop.check()?;
        if let Some(t) = f()? {
            return Ok(Some(t));
        }
        let Some(left) = deadline.remaining().map_or(Some(pause), |left| {
            (!left.is_zero()).then(|| left.min(pause))
        }) else {
            return Ok(None);
        };
        std::thread::sleep(left);
        pause = (pause * 2).min(max_pause);
    }
}

impl Queue {
    pub(crate) fn new(dir: PathBuf) -> Queue {
        Queue { dir }
    }

    /// Makes a numbered entry of `kind`, locked: its sequence number is above every number
    /// given before on this directory. Waits for the `state` file's lock until `deadline`
    /// (`None` when out of time).
    pub(crate) fn enqueue(
        &self,
        kind: Kind,
        deadline: Deadline,
        stop: &Stop<'_>,
    ) -> Result<Option<Entry>> {
        if let Err(e) = fs::create_dir_all(&self.dir) {
            return Err(io(format!("creating {}", self.dir.display()), &e));
        }
        if fastrand::u8(..) == 0 {
            self.sweep_tmp();
        }
        let (tmp, tmp_path) = self.locked_tmp()?;
        let mut tmp_guard = Entry {
            file: Some(tmp),
            path: tmp_path,
            seq: 0,
            ident: None,
        };
        let state_path = self.dir.join("state");
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&state_path);
        let mut state = opened.map_err(|e| io(format!("opening {}", state_path.display()), &e))?;
        // Held by others for microseconds (no sync in most turns): looked at again every
        // few microseconds, so that the order of numbers is the order of asking.
        let locked = until_done_every(STATE_PAUSE, deadline, stop, || match state.try_lock() {
            Ok(()) => Ok(Some(())),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(io(format!("locking {}", state_path.display()), &e))
            }
        })?;
        if locked.is_none() {
            return Ok(None);
        }
        let seq = self.next_seq(&mut state, &state_path)?;
        let path = self.dir.join(format!("{seq:020}-{}", kind.suffix()));
        fs::rename(&tmp_guard.path, &path)
            .map_err(|e| io(format!("renaming into {}", path.display()), &e))?;
        let _ = state.unlock();
        drop(state);
        let file = tmp_guard.file.take();
        let ident = match &file {
            Some(f) => f.metadata().ok().and_then(|m| ident_of(&m)),
            None => None,
        };
        Ok(Some(Entry {
            file,
            path,
            seq,
            ident,
        }))
    }

    /// A fresh `tmp-…` file holding our process id, under an exclusive lock.
    fn locked_tmp(&self) -> Result<(File, PathBuf)> {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        for _ in 0..16 {
            let path = self.dir.join(format!(
                "tmp-{}-{}-{:x}",
                std::process::id(),
                COUNT.fetch_add(1, Ordering::Relaxed),
                fastrand::u64(..)
            ));
            let mut file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(format!("creating {}", path.display()), &e)),
            };
            // A cleaner may hold it for the instant it takes to see it is not ours yet.
            if file.try_lock().is_err() {
                let _ = fs::remove_file(&path);
                continue;
            }
            let _ = writeln!(file, "{}", std::process::id());
            return Ok((file, path));
        }
        Err(Error::invalid(format!(
            "could not make an entry in {}",
            self.dir.display()
        )))
    }

    /// Gives the next number; called under the `state` lock. The file holds the last number
    /// given, a reserved bound synced to disk, and the boot it was written in: numbers up to
    /// the bound are given without a sync, and a new bound ([`RESERVE`] higher) is synced
    /// before any number above the old one is given. After a reboot (another boot id) the
    /// count goes on from the bound, above every number given before the machine went down,
    /// whatever the disk had kept of the unsynced writes. Where the boot cannot be told, every
    /// number is synced.
    fn next_seq(&self, state: &mut File, path: &Path) -> Result<u64> {
        let fail = |e: std::io::Error| io(format!("updating {}", path.display()), &e);
        let mut text = String::new();
        state.seek(SeekFrom::Start(0)).map_err(fail)?;
        state.read_to_string(&mut text).map_err(fail)?;
        let fresh = text.is_empty();
        let mut fields = text.split_whitespace();
        let mut number = |what: &str| -> Result<u64> {
            match fields.next() {
                None => Ok(0),
                Some(t) => t.parse().map_err(|_| {
                    Error::invalid(format!(
                        "{} holds {t:?} as its {what}, not a number: remove the lock's \
                         directory when nothing uses it",
                        path.display()
                    ))
                }),
            }
        };
        let (mut last, reserved) = (number("last number")?, number("reserved bound")?);
        let written_in = fields.next().unwrap_or("");
        let boot = boot_id();
        if boot.is_none_or(|b| b != written_in) {
            // Numbers up to the bound may have been given before a crash of the machine.
            last = last.max(reserved);
        }
        let next = last.checked_add(1).ok_or_else(|| {
            Error::invalid(format!("the counter of {} is exhausted", path.display()))
        })?;
        let sync = boot.is_none() || next > reserved;
        let reserved = match (sync, boot) {
            (false, _) => reserved,
            (true, Some(_)) => next.saturating_add(RESERVE),
            (true, None) => next,
        };
        let line = format!("{next:020} {reserved:020} {}\n", boot.unwrap_or("-"));
        state.seek(SeekFrom::Start(0)).map_err(fail)?;
        state.write_all(line.as_bytes()).map_err(fail)?;
        if text.len() > line.len() {
            state.set_len(line.len() as u64).map_err(fail)?;
        }
        if sync {
            state.sync_data().map_err(fail)?;
            if fresh {
                sync_dir(&self.dir);
            }
        }
        Ok(next)
    }

    /// The numbered entries, lowest first.
    pub(crate) fn list(&self) -> Result<Vec<Listed>> {
        let read = match fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(format!("listing {}", self.dir.display()), &e)),
        };
        let mut out = Vec::new();
        for item in read {
            let Ok(item) = item else { continue };
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(listed) = parse(name) {
                out.push(listed);
            }
        }
        out.sort_by_key(|l| l.seq);
        Ok(out)
    }

    /// Whether the entry `name` is alive (its owner holds its lock). A dead one is removed.
    pub(crate) fn alive(&self, name: &str) -> bool {
        let path = self.dir.join(name);
        let Ok(file) = File::open(&path) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                // Its owner is gone: nobody else will ever hold it.
                let _ = fs::remove_file(&path);
                false
            }
            Err(_) => true,
        }
    }

    /// Removes `tmp-…` files whose maker died before numbering them (older than [`TMP_AGE`],
    /// so that one being made now is never taken for dead).
    pub(crate) fn sweep_tmp(&self) {
        let Ok(read) = fs::read_dir(&self.dir) else {
            return;
        };
        for item in read.flatten() {
            let name = item.file_name();
            let old = item
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > TMP_AGE);
            if old && name.to_str().is_some_and(|n| n.starts_with("tmp-")) {
                let path = item.path();
                if let Ok(f) = File::open(&path) {
                    if f.try_lock().is_ok() {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
    }

    /// Waits until `rule` grants `entry` (its place in the listing: `Some(index)`), until the
    /// deadline passes (`None`; one look once it has), or until the stop says so.
    pub(crate) fn wait(
        &self,
        entry: &Entry,
        deadline: Deadline,
        stop: &Stop<'_>,
        rule: impl Fn(&[Listed], usize) -> Verdict,
    ) -> Result<Option<()>> {
        let mine = entry.name();
        let mut watched: Option<(String, File)> = None;
        until_done(deadline, stop, || {
            if let Some((name, file)) = &watched {
                // The entry waited for: still locked and still there means nothing changed.
                let locked = !matches!(file.try_lock_shared(), Ok(()));
                if locked && self.dir.join(name).exists() {
                    return Ok(None);
                }
                if !locked {
                    // Dead (or released and removed): remove it if it is still there.
                    let _ = fs::remove_file(self.dir.join(name));
                }
                watched = None;
            }
            loop {
                let listing = self.list()?;
                let Some(index) = listing.iter().position(|l| l.name == mine) else {
                    return Err(Error::LockLost);
                };
                let name = match rule(&listing, index) {
                    Verdict::Granted => return Ok(Some(())),
                    Verdict::Look => return Ok(None),
                    Verdict::WaitFor(name) => name,
                };
                let path = self.dir.join(&name);
                let Ok(file) = File::open(&path) else {
                    continue; // gone since the listing
                };
                if file.try_lock_shared().is_ok() {
                    // Its owner is gone: nobody else will ever hold it.
                    let _ = fs::remove_file(&path);
                    continue;
                }
                watched = Some((name, file));
                return Ok(None);
            }
        })
    }
}

/// `NNNNNNNNNNNNNNNNNNNN-KIND`, or nothing.
fn parse(name: &str) -> Option<Listed> {
    let (digits, suffix) = name.split_once('-')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Listed {
        seq: digits.parse().ok()?,
        kind: Kind::parse(suffix)?,
        name: name.to_owned(),
    })
}

/// Syncs a directory's own entries (the `state` file's name), where the platform can.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(dir: &Path) -> (Queue, File, PathBuf) {
        let path = dir.join("state");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        (Queue::new(dir.to_owned()), file, path)
    }

    #[test]
    fn numbers_rise_and_a_reboot_goes_on_above_the_synced_bound() {
        let dir = std::env::temp_dir().join(format!("zklock-counter-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (q, mut f, path) = counter(&dir);
        let numbers: Vec<u64> = (0..5).map(|_| q.next_seq(&mut f, &path).unwrap()).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5]);
        if boot_id().is_some() {
            // As the disk may hold it after a crash of the machine: an old last number, the
            // synced bound, another boot.
            let bound = 1 + RESERVE;
            fs::write(&path, format!("{:020} {bound:020} another-boot\n", 2)).unwrap();
            assert_eq!(q.next_seq(&mut f, &path).unwrap(), bound + 1);
            assert_eq!(q.next_seq(&mut f, &path).unwrap(), bound + 2);
        }
        fs::write(&path, "garbage").unwrap();
        assert!(q.next_seq(&mut f, &path).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_parse_and_others_are_ignored() {
        let l = parse("00000000000000000042-read").unwrap();
        assert_eq!((l.seq, l.kind), (42, Kind::Read));
        assert!(parse("state").is_none());
        assert!(parse("tmp-1-2-3").is_none());
        assert!(parse("0042-read").is_none());
        assert!(parse("00000000000000000042-other").is_none());
    }
}
