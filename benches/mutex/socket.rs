//! The socket floor: the lock protocol of `floor.rs` (create an ephemeral-sequential node, list,
//! getData-watch the predecessor and wait for its event, delete) over a blocking
//! `std::net::TcpStream`, encoded by hand, one request at a time — no wire library, no executor,
//! no reactor: what the kernel (loopback delivery included) and the server cost this process per
//! acquisition. Between it and the floor of `floor.rs` lies what a wire client adds; only a
//! figure measured here says how low any client could go on a given machine. Bench-only: no
//! reconnect and no pings (a run is far shorter than the session timeout).
//!
//! [`Session::open_threaded`] is the same with one change: a thread of the session reads every
//! answer and hands it to the caller, who writes its requests itself. A client that keeps its
//! session alive while nobody calls it (answers pings, receives watch events) needs such a
//! reader; this is the cheapest shape it can take, and so the floor of any such client.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::Res;

const CREATE: i32 = 1;
const DELETE: i32 = 2;
const GET_DATA: i32 = 4;
const GET_CHILDREN: i32 = 8;
const NO_NODE: i32 = -101;
/// The xid of a watch event.
const NOTIFICATION: i32 = -1;
const CLOSE_SESSION: i32 = -11;
const EPHEMERAL_SEQUENTIAL: i32 = 3;
const PERMS_ALL: i32 = 31;

/// One session on a blocking socket.
pub struct Session {
    /// Requests go out here.
    stream: TcpStream,
    xid: i32,
    frame: Vec<u8>,
    input: Input,
}

/// Where answers come from. Reads are buffered: one system call usually brings a whole frame
/// (length and body), often several.
enum Input {
    /// The caller reads them.
    Direct(BufReader<TcpStream>),
    /// A thread of the session reads them and hands them over.
    Threaded(mpsc::Receiver<Vec<u8>>, JoinHandle<()>),
}

impl Session {
    /// Connects to the first host of `connect` and opens a session; the caller's thread reads
    /// the answers.
    pub fn open(connect: &str, timeout: Duration) -> Res<Session> {
        Session::connect(connect, timeout, false)
    }

    /// [`open`](Session::open), with a thread of the session reading every answer.
    pub fn open_threaded(connect: &str, timeout: Duration) -> Res<Session> {
        Session::connect(connect, timeout, true)
    }

    fn connect(connect: &str, timeout: Duration, threaded: bool) -> Res<Session> {
        let host = connect.split(',').next().unwrap_or(connect);
        let stream = TcpStream::connect(host)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(crate::STALL))?;
        let mut from = BufReader::new(stream.try_clone()?);
        let input = if threaded {
            let (tx, rx) = mpsc::channel();
            let thread = thread::Builder::new()
                .name("socket-reader".into())
                .spawn(move || {
                    while let Ok(frame) = read_frame(&mut from, Vec::new()) {
                        if tx.send(frame).is_err() {
                            break;
                        }
                    }
                })?;
            Input::Threaded(rx, thread)
        } else {
            Input::Direct(from)
        };
        let mut session = Session {
            stream,
            xid: 0,
            frame: Vec::with_capacity(4096),
            input,
        };
        // ConnectRequest: protocol version, last zxid seen, timeout, session id, password,
        // read-only.
        let mut body = Vec::new();
        put_i32(&mut body, 0);
        put_i64(&mut body, 0);
        put_i32(&mut body, timeout.as_millis().try_into()?);
        put_i64(&mut body, 0);
        put_bytes(&mut body, &[0; 16]);
        body.push(0);
        session.send(&body)?;
        let answer = session.receive()?;
        if answer.len() < 16 {
            return Err(format!("short connect answer ({} bytes)", answer.len()).into());
        }
        Ok(session)
    }

    /// Creates an ephemeral-sequential node open to all; returns its path.
    pub fn create(&mut self, prefix: &str) -> Res<String> {
        let mut body = self.header(CREATE);
        put_str(&mut body, prefix);
        put_bytes(&mut body, &[]);
        put_i32(&mut body, 1);
        put_i32(&mut body, PERMS_ALL);
        put_str(&mut body, "world");
        put_str(&mut body, "anyone");
        put_i32(&mut body, EPHEMERAL_SEQUENTIAL);
        let mut answer = self.call(&body)?;
        answer.string()
    }

    /// The names of `path`'s children.
    pub fn children(&mut self, path: &str) -> Res<Vec<String>> {
        let mut body = self.header(GET_CHILDREN);
        put_str(&mut body, path);
        body.push(0);
        let mut answer = self.call(&body)?;
        let n = answer.i32()?;
        (0..n).map(|_| answer.string()).collect()
    }

    /// Queues under `dir` and waits until first; returns our node.
    pub fn acquire(&mut self, dir: &str) -> Res<String> {
        let node = self.create(&format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4()))?;
        let ours = node[dir.len() + 1..].to_owned();
        loop {
            let mut children = self.children(dir)?;
            children.sort_by(|a, b| sequence(a).cmp(sequence(b)));
            let at = children
                .iter()
                .position(|c| *c == ours)
                .ok_or("our node vanished")?;
            if at == 0 {
                return Ok(node);
            }
            if self.watch_data(&format!("{dir}/{}", children[at - 1]))? {
                self.wait_event()?;
            }
        }
    }

    /// getData with a watch; false if the node is gone (no watch then).
    fn watch_data(&mut self, path: &str) -> Res<bool> {
        let mut body = self.header(GET_DATA);
        put_str(&mut body, path);
        body.push(1);
        let (err, _) = self.call_raw(&body)?;
        match err {
            0 => Ok(true),
            NO_NODE => Ok(false),
            _ => Err(format!("ZooKeeper error {err} on getData").into()),
        }
    }

    /// Waits for the one watch this session has set (bounded by the socket's read timeout).
    fn wait_event(&mut self) -> Res<()> {
        let mut frame = Reader(self.receive()?);
        match frame.i32()? {
            NOTIFICATION => Ok(()),
            xid => Err(format!("unexpected answer (xid {xid}) while waiting for an event").into()),
        }
    }

    pub fn delete(&mut self, path: &str) -> Res<()> {
        let mut body = self.header(DELETE);
        put_str(&mut body, path);
        put_i32(&mut body, -1);
        self.call(&body).map(drop)
    }

    /// Closes the session (its ephemeral nodes go with it) and waits for its reader.
    pub fn close(mut self) -> Res<()> {
        let body = self.header(CLOSE_SESSION);
        self.call(&body)?;
        if let Input::Threaded(rx, thread) = self.input {
            // The server closes the connection after its answer: the reader sees the end.
            drop(rx);
            thread.join().map_err(|_| "the socket reader panicked")?;
        }
        Ok(())
    }

    fn header(&mut self, op: i32) -> Vec<u8> {
        self.xid += 1;
        let mut body = Vec::with_capacity(128);
        put_i32(&mut body, self.xid);
        put_i32(&mut body, op);
        body
    }

    /// Sends a request and reads its answer past the reply header (xid, zxid, error).
    fn call(&mut self, body: &[u8]) -> Res<Reader<'_>> {
        match self.call_raw(body)? {
            (0, answer) => Ok(answer),
            (err, _) => Err(format!("ZooKeeper error {err}").into()),
        }
    }

    /// [`call`](Session::call), with the error code.
    fn call_raw(&mut self, body: &[u8]) -> Res<(i32, Reader<'_>)> {
        self.send(body)?;
        let xid = self.xid;
        let mut answer = Reader(self.receive()?);
        let (got, _zxid, err) = (answer.i32()?, answer.i64()?, answer.i32()?);
        if got != xid {
            return Err(format!("answer for xid {got}, expected {xid}").into());
        }
        Ok((err, answer))
    }

    fn send(&mut self, body: &[u8]) -> Res<()> {
        let mut framed = Vec::with_capacity(body.len() + 4);
        put_i32(&mut framed, body.len().try_into()?);
        framed.extend_from_slice(body);
        Ok(self.stream.write_all(&framed)?)
    }

    fn receive(&mut self) -> Res<&[u8]> {
        self.frame = match &mut self.input {
            Input::Threaded(rx, _) => rx
                .recv_timeout(crate::STALL)
                .map_err(|e| format!("the socket reader: {e}"))?,
            Input::Direct(from) => read_frame(from, std::mem::take(&mut self.frame))?,
        };
        Ok(&self.frame)
    }
}

/// One length-prefixed frame from `from`, into `frame`'s allocation.
fn read_frame(from: &mut impl Read, mut frame: Vec<u8>) -> Res<Vec<u8>> {
    let mut len = [0; 4];
    from.read_exact(&mut len)?;
    let len = usize::try_from(i32::from_be_bytes(len))?;
    if len > 16 << 20 {
        return Err(format!("implausible frame of {len} bytes").into());
    }
    frame.resize(len, 0);
    from.read_exact(&mut frame)?;
    Ok(frame)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Res<&[u8]> {
        if self.0.len() < n {
            return Err("answer shorter than its fields".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i32(&mut self) -> Res<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into()?))
    }

    fn i64(&mut self) -> Res<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into()?))
    }

    fn string(&mut self) -> Res<String> {
        let n = usize::try_from(self.i32()?)?;
        Ok(String::from_utf8(self.take(n)?.to_vec())?)
    }
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_i32(out, b.len() as i32);
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn sequence(name: &str) -> &str {
    &name[name.len().saturating_sub(10)..]
}
