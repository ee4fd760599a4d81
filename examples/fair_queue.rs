//! Fairness across processes, on any backend: this program takes a lock, starts six copies of
//! itself that ask for the same lock 150 ms apart, and lets go once all six wait. Each copy
//! holds the lock for 100 ms. The grants must come in the order of asking, with rising fencing
//! tokens, and never two holders at once (each holder makes a marker file that must not exist
//! yet): otherwise the program exits non-zero.
//!
//! With no argument it runs on `file://` in a fresh temporary directory: no server, no install.
//! Any lock URL runs the same demo on that backend.
//!
//! ```sh
//! cargo run --example fair_queue                           # file://, no server
//! cargo run --example fair_queue -- zk://127.0.0.1:2181    # the same on ZooKeeper
//! ```

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zklock::Lock;

const CONTENDERS: usize = 6;
const ASK_EVERY: Duration = Duration::from_millis(150);
const HOLD: Duration = Duration::from_millis(100);
/// Bounds every wait, so that the demo cannot hang.
const GIVE_UP: Duration = Duration::from_secs(30);
const LOCK: &str = "demo-fairness";

type BoxError = Box<dyn Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, url, marks, i] = args.as_slice() {
        if flag == "--contender" {
            return contender(url, Path::new(marks), i.parse()?);
        }
    }
    let scratch = std::env::temp_dir().join(format!("zklock-demo-{}", std::process::id()));
    let url = match args.first() {
        Some(url) => url.clone(),
        None => format!("file://{}", scratch.join("locks").display()),
    };
    let result = lead(&url, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The first holder: starts the contenders, lets go once all of them wait, then checks the
/// order they were granted in.
fn lead(url: &str, scratch: &Path) -> Result<(), BoxError> {
    let start = Instant::now();
    let say = |msg: &str| println!("{:>6.2}s {msg}", start.elapsed().as_secs_f64());
    let marks = scratch.join("marks");
    std::fs::create_dir_all(&marks)?;
    let locks = zklock::connect(url)?;
    say(&format!("{url}: the {} backend", locks.backend()));
    let lock = locks.mutex(LOCK)?;
    if !lock.acquire_timeout(GIVE_UP)? {
        return Err("the lock stayed busy".into());
    }
    say(&format!(
        "main holds    (token {})",
        lock.fencing_token().unwrap_or_default()
    ));
    let (tx, lines) = std::sync::mpsc::channel();
    let spawner = {
        let (url, marks) = (url.to_owned(), marks.display().to_string());
        std::thread::spawn(move || -> Result<Vec<Child>, String> {
            let mut children = Vec::new();
            for i in 0..CONTENDERS {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let mut child = Command::new(exe)
                    .args(["--contender", &url, &marks, &i.to_string()])
                    .stdout(Stdio::piped())
                    .spawn()
                    .map_err(|e| e.to_string())?;
                let out = child.stdout.take().ok_or("no output")?;
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(out).lines().map_while(Result::ok) {
                        let _ = tx.send(line);
                    }
                });
                children.push(child);
                std::thread::sleep(ASK_EVERY);
            }
            Ok(children)
        })
    };
    let (mut asked, mut granted) = (Vec::new(), Vec::new());
    let mut released = false;
    let until = Instant::now() + GIVE_UP;
    while granted.len() < CONTENDERS {
        let left = until.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .map_err(|_| "a contender fell silent")?;
        let mut words = line.split_whitespace();
        let (Some(who), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let who: usize = who.trim_start_matches('t').parse()?;
        match what {
            "asks" => asked.push(who),
            "holds" => {
                let token: u64 = words.last().unwrap_or("0").trim_end_matches(')').parse()?;
                granted.push((who, token));
            }
            "OVERLAP" => return Err(format!("two holders at once: {line}").into()),
            _ => {}
        }
        say(&line);
        if asked.len() == CONTENDERS && !released {
            // Give the last one time to queue, then let go.
            std::thread::sleep(ASK_EVERY);
            say("main releases: the queue is served in order");
            lock.release()?;
            released = true;
        }
    }
    let children = spawner.join().map_err(|_| "the spawner panicked")??;
    for mut c in children {
        if !c.wait()?.success() {
            return Err("a contender failed".into());
        }
    }
    let order: Vec<usize> = granted.iter().map(|g| g.0).collect();
    let rising = granted.windows(2).all(|w| w[0].1 < w[1].1);
    println!("asked:   {asked:?}\ngranted: {order:?}\ntokens rising: {rising}");
    if order != asked || !rising {
        return Err("not served in the order of asking".into());
    }
    println!("fair: first come, first served, one holder at a time");
    Ok(())
}

/// A contender: asks, holds for a while with a marker file nobody else may have, lets go.
fn contender(url: &str, marks: &Path, i: usize) -> Result<(), BoxError> {
    let locks = zklock::connect(url)?;
    let lock = locks.mutex(LOCK)?;
    println!("t{i} asks");
    let guard = lock.try_lock_for(GIVE_UP)?.ok_or("gave up waiting")?;
    let mark: PathBuf = marks.join("holder");
    let marked = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&mark);
    if marked.is_err() {
        println!("t{i} OVERLAP: the marker of another holder is there");
    }
    println!("t{i} holds     (token {})", guard.fencing_token());
    std::thread::sleep(HOLD);
    std::fs::remove_file(&mark)?;
    drop(guard);
    Ok(())
}
