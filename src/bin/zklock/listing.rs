//! What `holders`, `watch` and `run`'s waiting line print, the same on every backend: a lock
//! name's holders and waiters in lock order, as one table or one JSON document (the schema is in
//! `docs/cli.md`). Each backend fills in what it knows; the rest prints as `-` (`null`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::CliResult;

/// A lock name's holders and waiters.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// `zookeeper`, `redis`, `postgres` or `mysql`.
    pub backend: &'static str,
    /// The name (ZooKeeper: the path) as given.
    pub name: String,
    /// `mutex`, `read-write`, `semaphore`, `latch` or `empty`.
    pub layout: &'static str,
    /// Holders first, then waiters in queue order (where the server keeps one).
    pub entries: Vec<Entry>,
}

/// One holder or waiter.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `lock`, `read`, `write`, `lease` or `latch`.
    pub kind: String,
    /// Whether it holds (`None`: cannot tell, a ZooKeeper semaphore without `--max-leases`).
    pub holds: Option<bool>,
    /// What the backend names it by: a node's path, a queue member, a server session.
    pub id: String,
    /// Who it is: the data a ZooKeeper node carries, a database session's user, address and
    /// application.
    pub owner: Option<String>,
    /// The server session that holds or waits.
    pub session: Option<String>,
    /// The fencing token of its hold, where the server shows it.
    pub token: Option<u64>,
    /// How long it has held or waited.
    pub age: Option<Duration>,
    /// How long until the server frees it unless renewed (Redis's TTLs).
    pub expires_in: Option<Duration>,
}

impl Listing {
    /// The layout the kinds of its entries show.
    pub fn layout_of(entries: &[Entry]) -> &'static str {
        let has = |kind: &str| entries.iter().any(|e| e.kind == kind);
        if has("read") || has("write") {
            "read-write"
        } else if has("lease") {
            "semaphore"
        } else if has("latch") {
            "latch"
        } else if entries.is_empty() {
            "empty"
        } else {
            "mutex"
        }
    }

    /// Who holds and who waits, without the ages that change on every read: a change of it is
    /// what `watch` prints.
    pub fn key(&self) -> Vec<(String, String, Option<bool>)> {
        self.entries
            .iter()
            .map(|e| (e.kind.clone(), e.id.clone(), e.holds))
            .collect()
    }

    pub fn holders(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.holds == Some(true))
    }

    /// The listing as a table: a title line, then one aligned row per entry.
    pub fn table(&self) -> String {
        let count = self.entries.len();
        let mut out = format!(
            "{} ({} on {}, {count} {})\n",
            self.name,
            self.layout,
            self.backend,
            if count == 1 { "entry" } else { "entries" }
        );
        if self.entries.is_empty() {
            out.push_str("no one holds or waits\n");
            return out;
        }
        let header = [
            "POS", "KIND", "HOLDS", "TOKEN", "SESSION", "AGE", "EXPIRES", "OWNER", "ID",
        ];
        let dash = || "-".to_owned();
        let rows: Vec<[String; 9]> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                [
                    i.to_string(),
                    e.kind.clone(),
                    holds_text(e.holds).to_owned(),
                    e.token.map_or_else(dash, |t| t.to_string()),
                    e.session.clone().unwrap_or_else(dash),
                    e.age.map_or_else(dash, age),
                    e.expires_in.map_or_else(dash, age),
                    e.owner
                        .as_deref()
                        .filter(|o| !o.is_empty())
                        .map_or_else(dash, |o| o.escape_debug().to_string()),
                    e.id.clone(),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[&str]| {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(cell);
                } else {
                    s.push_str(&format!("{cell:<w$}  "));
                }
            }
            s.push('\n');
            s
        };
        out.push_str(&line(&header));
        for row in &rows {
            out.push_str(&line(&row.each_ref().map(String::as_str)));
        }
        out
    }

    /// The listing as one JSON document on one line (the schema in `docs/cli.md`).
    pub fn json(&self) -> String {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        let entries: Vec<_> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                json!({
                    "position": i,
                    "kind": e.kind,
                    "holds": e.holds,
                    "id": e.id,
                    "owner": e.owner,
                    "session": e.session,
                    "fencing_token": e.token,
                    "age_ms": ms(e.age),
                    "expires_in_ms": ms(e.expires_in),
                })
            })
            .collect();
        json!({
            "backend": self.backend,
            "name": self.name,
            "layout": self.layout,
            "entries": entries,
        })
        .to_string()
    }

    /// Prints the listing: JSON on one line, or the table.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", self.json());
        } else {
            print!("{}", self.table());
        }
        let _ = std::io::stdout().flush();
    }

    /// One line on who holds, for `run`'s waiting report.
    pub fn held_by(&self) -> String {
        let holders: Vec<String> = self
            .holders()
            .map(|e| {
                let who = e
                    .owner
                    .as_deref()
                    .filter(|o| !o.is_empty())
                    .unwrap_or(&e.id);
                let mut about = Vec::new();
                if let Some(session) = &e.session {
                    about.push(format!("session {session}"));
                }
                if let Some(held) = e.age {
                    about.push(format!("for {}", age(held)));
                }
                if about.is_empty() {
                    who.to_owned()
                } else {
                    format!("{who} ({})", about.join(", "))
                }
            })
            .collect();
        if holders.is_empty() {
            "no one holds it yet".to_owned()
        } else {
            format!("held by {}", holders.join(", "))
        }
    }
}

fn holds_text(h: Option<bool>) -> &'static str {
    match h {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

/// `12.3s`, `4m05s`, `2h03m`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// `watch`: prints the listing, then again each time who holds or waits changes, until the
/// listing fails or `wait` says to stop; `wait` returns after a change may have happened
/// (ZooKeeper: a watch fired; elsewhere: a short sleep, the server telling no one).
pub fn watch(
    mut read: impl FnMut() -> CliResult<Listing>,
    mut wait: impl FnMut(&Listing) -> CliResult<bool>,
    json: bool,
) -> CliResult<()> {
    let mut last = None;
    loop {
        let now = read()?;
        let key = now.key();
        if last.as_ref() != Some(&key) {
            if !json {
                println!("--- {}", clock());
            }
            now.print(json);
            last = Some(key);
        }
        if !wait(&now)? {
            return Ok(());
        }
    }
}

/// While `waiting`: says on stderr who holds `name`, each time that changes.
pub fn report_waiting(
    name: String,
    read: Arc<dyn Fn() -> CliResult<Listing> + Send + Sync>,
    waiting: Arc<AtomicBool>,
) {
    thread::spawn(move || {
        let mut last = None;
        let done = || !waiting.load(Ordering::SeqCst);
        loop {
            thread::sleep(Duration::from_millis(300));
            if done() {
                break;
            }
            if let Ok(listing) = read() {
                let holders: Vec<_> = listing.holders().map(|e| e.id.clone()).collect();
                if last.as_ref() != Some(&holders) && !done() {
                    eprintln!("zklock: waiting for {name}: {}", listing.held_by());
                    last = Some(holders);
                }
            }
            thread::sleep(Duration::from_millis(700));
        }
    });
}

/// The wall-clock time of day (UTC), for `watch`'s separators.
fn clock() -> String {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "{:02}:{:02}:{:02} UTC",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, holds: bool) -> Entry {
        Entry {
            kind: kind.to_owned(),
            holds: Some(holds),
            id: format!("{kind}-1"),
            owner: None,
            session: Some("0x1".to_owned()),
            token: None,
            age: Some(Duration::from_millis(1500)),
            expires_in: None,
        }
    }

    #[test]
    fn every_column_prints_and_unknown_ones_as_a_dash() {
        let entries = vec![entry("lock", true), entry("lock", false)];
        let listing = Listing {
            backend: "redis",
            name: "jobs".to_owned(),
            layout: Listing::layout_of(&entries),
            entries,
        };
        let table = listing.table();
        assert!(
            table.starts_with("jobs (mutex on redis, 2 entries)\n"),
            "{table}"
        );
        assert!(table.contains("POS  KIND  HOLDS  TOKEN"), "{table}");
        assert!(table.contains("0    lock  yes    -      0x1"), "{table}");
        let doc: serde_json::Value = serde_json::from_str(&listing.json()).unwrap();
        assert_eq!(doc["layout"], "mutex");
        assert_eq!(doc["entries"][1]["holds"], false);
        assert_eq!(doc["entries"][0]["fencing_token"], serde_json::Value::Null);
        assert_eq!(doc["entries"][0]["age_ms"], 1500);
        assert_eq!(listing.held_by(), "held by lock-1 (session 0x1, for 1.5s)");
    }

    #[test]
    fn layouts_follow_the_kinds() {
        assert_eq!(Listing::layout_of(&[]), "empty");
        assert_eq!(Listing::layout_of(&[entry("write", true)]), "read-write");
        assert_eq!(Listing::layout_of(&[entry("lease", true)]), "semaphore");
        assert_eq!(Listing::layout_of(&[entry("latch", true)]), "latch");
    }
}
