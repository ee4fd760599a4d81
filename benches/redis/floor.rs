//! The floor: zklock's Redis lock protocol on blocking sockets with hand-encoded commands, no
//! library — the same scripts (`EVALSHA`), the same wake-up channel per session. What any
//! client of this protocol costs at least on the machine at hand.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::Res;

/// A RESP value, as far as the lock's answers need.
#[derive(Debug)]
pub enum Reply {
    Int(i64),
    Text(String),
    Nil,
    List(Vec<Reply>),
}

impl Reply {
    fn int(&self) -> i64 {
        match self {
            Reply::Int(i) => *i,
            _ => -1,
        }
    }
}

/// One blocking connection.
pub struct Conn {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

impl Conn {
    pub fn open(port: u16) -> Res<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            input: BufReader::new(s.try_clone()?),
            out: s,
        })
    }

    pub fn send(&mut self, args: &[&str]) -> Res<()> {
        let mut buf = format!("*{}\r\n", args.len());
        for a in args {
            buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.out.write_all(buf.as_bytes())?;
        Ok(())
    }

    pub fn read(&mut self) -> Res<Reply> {
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            return Err("connection closed".into());
        }
        let line = line.trim_end();
        let (kind, rest) = line.split_at(1);
        Ok(match kind {
            ":" => Reply::Int(rest.parse()?),
            "+" => Reply::Text(rest.to_owned()),
            "-" => return Err(format!("server error: {rest}").into()),
            "$" => {
                let n: i64 = rest.parse()?;
                if n < 0 {
                    Reply::Nil
                } else {
                    let mut b = vec![0; n as usize + 2];
                    std::io::Read::read_exact(&mut self.input, &mut b)?;
                    b.truncate(n as usize);
                    Reply::Text(String::from_utf8_lossy(&b).into_owned())
                }
            }
            "*" => {
                let n: i64 = rest.parse()?;
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(self.read()?);
                }
                Reply::List(items)
            }
            _ => return Err(format!("bad reply {line:?}").into()),
        })
    }

    pub fn call(&mut self, args: &[&str]) -> Res<Reply> {
        self.send(args)?;
        self.read()
    }
}

/// One session of the floor: a command connection and a subscriber connection.
pub struct Session {
    cmd: Conn,
    sub: Conn,
    me: String,
    seq: u64,
    acquire: String,
    release: String,
    keys: [String; 4],
}

/// The lock's scripts, loaded once; their hashes.
pub fn load(port: u16) -> Res<(String, String)> {
    let mut c = Conn::open(port)?;
    let load = |c: &mut Conn, body: &str| -> Res<String> {
        match c.call(&["SCRIPT", "LOAD", body])? {
            Reply::Text(sha) => Ok(sha),
            other => Err(format!("SCRIPT LOAD: {other:?}").into()),
        }
    };
    Ok((
        load(
            &mut c,
            &format!("{}{}", crate::scripts::HEAD, crate::scripts::ACQUIRE),
        )?,
        load(
            &mut c,
            &format!("{}{}", crate::scripts::HEAD, crate::scripts::RELEASE),
        )?,
    ))
}

impl Session {
    pub fn open(port: u16, name: &str, id: &str, shas: &(String, String)) -> Res<Session> {
        let mut sub = Conn::open(port)?;
        let channel = format!("zklock:wake:{id}");
        sub.call(&["SUBSCRIBE", &channel])?;
        let holder = format!("zklock:{{{name}}}");
        Ok(Session {
            cmd: Conn::open(port)?,
            sub,
            me: id.to_owned(),
            seq: 0,
            acquire: shas.0.clone(),
            release: shas.1.clone(),
            keys: [
                holder.clone(),
                format!("{holder}:queue"),
                format!("{holder}:timeouts"),
                format!("{holder}:token"),
            ],
        })
    }

    fn eval(&mut self, sha: &str, args: &[&str]) -> Res<Reply> {
        let mut all: Vec<&str> = vec!["EVALSHA", sha, "4"];
        all.extend(self.keys.iter().map(String::as_str));
        all.extend_from_slice(args);
        self.cmd.call(&all)
    }

    /// Waits until this session holds the lock; returns the owner id to release with.
    pub fn lock(&mut self) -> Res<String> {
        self.seq += 1;
        let owner = format!("{}:{}", self.me, self.seq);
        loop {
            let sha = self.acquire.clone();
            let reply = self.eval(&sha, &[&owner, "30000", "30000", "1", "300000"])?;
            let Reply::List(items) = reply else {
                return Err("bad acquire reply".into());
            };
            if items[0].int() == 1 {
                return Ok(owner);
            }
            // Park on the subscriber connection for the wake-up (or the expiry hint).
            let wait = Duration::from_millis(items[1].int().clamp(1, 10_000) as u64 + 2);
            self.sub.input.get_ref().set_read_timeout(Some(wait))?;
            match self.sub.read() {
                Ok(_) => {}
                Err(e) if is_timeout(&*e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub fn unlock(&mut self, owner: &str) -> Res<()> {
        let sha = self.release.clone();
        self.eval(&sha, &[owner])?;
        Ok(())
    }
}

fn is_timeout(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}
