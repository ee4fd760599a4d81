//! Transactions: ZooKeeper's multi, a list of checks and writes the server applies all
//! together or not at all ([`Client::multi`], built from [`Op`]s, answered with
//! [`OpResult`]s).

use std::sync::atomic::{AtomicBool, Ordering};

use zookeeper_client as zk;

use super::acl::AclSource;
use super::limits::{check_data, MAX_PACKET, REQUEST_OVERHEAD};
use super::types::{Acl, CreateMode, Stat};
use super::Client;
use crate::core::error::{Error, Result};
use crate::zookeeper::path;

/// One operation of a transaction ([`Client::multi`]): a check or a write, with Curator's and
/// kazoo's four kinds (`check`, `create`, `setData`, `delete`).
///
/// A version is a node's data version ([`Stat::version`]); the operations without one
/// (`set_data`, `delete`, `check_exists`) accept any. Nothing is checked when the `Op` is
/// made: [`Client::multi`] refuses a bad path or argument before any I/O.
///
/// # Example
/// ```
/// use zklock::zookeeper::Op;
/// use zklock::CreateMode;
///
/// let ops = [
///     Op::check("/app/config", 3),
///     Op::create("/app/jobs/job-", b"payload", CreateMode::PersistentSequential),
///     Op::set_data_version("/app/config", b"v4", 3),
///     Op::delete("/app/stale"),
/// ];
/// assert_eq!(ops[0].path(), "/app/config");
/// assert_eq!(ops[2].to_string(), "set_data /app/config at version 3");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op(Kind);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Check {
        path: String,
        version: Option<i32>,
    },
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
        acl: Option<Vec<Acl>>,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
}

impl Op {
    /// Fails the transaction unless the node exists with data version `version`.
    pub fn check(path: &str, version: i32) -> Op {
        Op(Kind::Check {
            path: path.to_owned(),
            version: Some(version),
        })
    }

    /// Fails the transaction unless the node exists (any version).
    pub fn check_exists(path: &str) -> Op {
        Op(Kind::Check {
            path: path.to_owned(),
            version: None,
        })
    }

    /// Creates a node with `data`, as `mode` says, with the ACL the Client's
    /// [`AclProvider`](crate::AclProvider) gives the path. The parent must exist (a
    /// transaction creates no missing parents). A sequential node's name gets its sequence
    /// appended; [`OpResult::Create`] says the name made.
    pub fn create(path: &str, data: &[u8], mode: CreateMode) -> Op {
        Op(Kind::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode,
            acl: None,
        })
    }

    /// [`create`](Op::create) with the ACL `acl` (not empty).
    pub fn create_with_acl(path: &str, data: &[u8], mode: CreateMode, acl: Vec<Acl>) -> Op {
        Op(Kind::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode,
            acl: Some(acl),
        })
    }

    /// Sets the node's data, whatever its version.
    pub fn set_data(path: &str, data: &[u8]) -> Op {
        Op(Kind::SetData {
            path: path.to_owned(),
            data: data.to_vec(),
            version: None,
        })
    }

    /// Sets the node's data if its data version is `version`.
    pub fn set_data_version(path: &str, data: &[u8], version: i32) -> Op {
        Op(Kind::SetData {
            path: path.to_owned(),
            data: data.to_vec(),
            version: Some(version),
        })
    }

    /// Deletes the node (it must have no children), whatever its version.
    pub fn delete(path: &str) -> Op {
        Op(Kind::Delete {
            path: path.to_owned(),
            version: None,
        })
    }

    /// Deletes the node if its data version is `version`.
    pub fn delete_version(path: &str, version: i32) -> Op {
        Op(Kind::Delete {
            path: path.to_owned(),
            version: Some(version),
        })
    }

    /// The path the operation is on (as given; for a sequential create, before its sequence).
    pub fn path(&self) -> &str {
        match &self.0 {
            Kind::Check { path, .. }
            | Kind::Create { path, .. }
            | Kind::SetData { path, .. }
            | Kind::Delete { path, .. } => path,
        }
    }

    /// Refuses what the server would refuse, or could not be sent, before any I/O.
    fn validate(&self) -> Result<()> {
        let (version, sequential) = match &self.0 {
            Kind::Check { version, .. } => (*version, false),
            Kind::Create {
                data, mode, acl, ..
            } => {
                check_data(data)?;
                if acl.as_ref().is_some_and(Vec::is_empty) {
                    return Err(Error::invalid(format!("{self}: the ACL must not be empty")));
                }
                (None, mode.is_sequential())
            }
            Kind::SetData { data, version, .. } => {
                check_data(data)?;
                (*version, false)
            }
            Kind::Delete { version, .. } => (*version, false),
        };
        path::validate(self.path(), sequential)?;
        if self.path() == "/" && !matches!(self.0, Kind::Check { .. }) {
            return Err(Error::InvalidPath {
                path: "/".into(),
                reason: "the root cannot be created, set or deleted",
            });
        }
        if version.is_some_and(|v| v < 0) {
            return Err(Error::invalid(format!(
                "{self}: a version is never negative (for any version use Op::check_exists, \
                 Op::set_data or Op::delete)"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, version) = match &self.0 {
            Kind::Check { version: None, .. } => ("check_exists", None),
            Kind::Check { version, .. } => ("check", *version),
            Kind::Create { mode, .. } => {
                return write!(f, "create {} ({mode:?})", self.path());
            }
            Kind::SetData { version, .. } => ("set_data", *version),
            Kind::Delete { version, .. } => ("delete", *version),
        };
        write!(f, "{what} {}", self.path())?;
        match version {
            Some(v) => write!(f, " at version {v}"),
            None => Ok(()),
        }
    }
}

/// What one operation of a committed transaction did, in the order of the [`Op`]s.
///
/// # Example
/// ```no_run
/// use zklock::zookeeper::{Op, OpResult};
/// use zklock::CreateMode;
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let results = client.multi(&[Op::create("/jobs/job-", b"", CreateMode::PersistentSequential)])?;
/// if let OpResult::Create { path, .. } = &results[0] {
///     println!("made {path}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpResult {
    /// The check passed.
    Check,
    /// The node was made.
    Create {
        /// Its path (with the sequence, for a sequential node).
        path: String,
        /// Its stat; `None` when the server sent none that is valid (some ZooKeeper versions
        /// answer a create inside a multi without one).
        stat: Option<Stat>,
    },
    /// The data was set.
    SetData {
        /// The node's stat after the write.
        stat: Stat,
    },
    /// The node was deleted.
    Delete,
}

/// An [`Op`] ready to send: a create's ACL worked out on the caller's thread (a user's
/// provider never runs on the I/O thread).
struct Prepared<'a> {
    op: &'a Op,
    acl: Vec<zk::Acl>,
}

impl Client {
    /// Runs `ops` as one transaction (ZooKeeper's multi, Curator's `transaction()`, kazoo's
    /// `transaction()`): the server applies every operation, in order, or none of them. An
    /// empty list is answered at once, without I/O.
    ///
    /// # Blocking and errors
    /// One call, bounded as every call of the Client (see [`Client`]). A bad path or argument
    /// in any operation is [`InvalidPath`](Error::InvalidPath) /
    /// [`InvalidArgument`](Error::InvalidArgument) before any I/O, and so is a transaction
    /// over ZooKeeper's packet limit. When an operation fails, the transaction fails with
    /// [`Error::TransactionFailed`]: which operation (its index in `ops`), what it was, and
    /// the server's reason ([`BadVersion`](Error::BadVersion), [`NoNode`](Error::NoNode),
    /// [`NodeExists`](Error::NodeExists), [`NotEmpty`](Error::NotEmpty),
    /// [`NoAuth`](Error::NoAuth), ...); nothing was applied.
    ///
    /// The transaction is retried only while it has not been handed to a connection. A
    /// [`ConnectionLoss`](Error::ConnectionLoss) or [`Timeout`](Error::Timeout) after that
    /// leaves its outcome unknown (it may have been applied): read the nodes to find out.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let (_, stat) = client.data("/app/config")?;
    /// // The new config and its audit entry, both or neither, and only over what was read.
    /// match client.multi(&[
    ///     Op::set_data_version("/app/config", b"v2", stat.version),
    ///     Op::create("/app/audit/entry-", b"v2", zklock::CreateMode::PersistentSequential),
    /// ]) {
    ///     Ok(results) => println!("{results:?}"),
    ///     Err(zklock::Error::TransactionFailed { index, op, source }) => {
    ///         println!("operation {index} ({op}) failed: {source}");
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let prepared = self.prepare(ops)?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let prepared = &prepared;
        let mut call = self.user_call();
        let sent = AtomicBool::new(false);
        loop {
            let attempt = self.run_once(&mut call, |zk, _| {
                sent.store(true, Ordering::Relaxed);
                commit(zk, prepared)
            });
            match attempt {
                Err(e) if e.is_retryable() && !sent.load(Ordering::Relaxed) => {
                    tracing::debug!("multi: {e}");
                    self.backoff(&mut call, e)?;
                }
                other => return other,
            }
        }
    }

    /// Validates `ops` and works out the creates' ACLs, before any I/O.
    fn prepare<'a>(&self, ops: &'a [Op]) -> Result<Vec<Prepared<'a>>> {
        let config = &self.shared().config;
        let namespace = self.namespace().map_or(0, |ns| ns.len() + 1);
        let mut size = 0;
        let mut prepared = Vec::with_capacity(ops.len());
        for op in ops {
            op.validate()?;
            let (data, acl) = match &op.0 {
                Kind::Create { data, acl, .. } => {
                    let acl: Vec<zk::Acl> = match acl {
                        Some(acl) => acl.iter().map(Acl::to_zk).collect(),
                        None => AclSource {
                            provider: config.acl.clone(),
                            namespace: config.namespace.clone(),
                        }
                        .zk_acl(op.path()),
                    };
                    if acl.is_empty() {
                        return Err(Error::invalid(format!("{op}: no ACL for the path")));
                    }
                    if acl.iter().any(|a| a.scheme() == "auth") && !self.shared().has_credentials()
                    {
                        return Err(Error::invalid(format!(
                            "{op}: the ACL grants the creator (`auth`), but this Client has no \
                             credentials: add them with ClientBuilder::digest_auth / auth or \
                             Client::add_auth"
                        )));
                    }
                    (data.len(), acl)
                }
                Kind::SetData { data, .. } => (data.len(), Vec::new()),
                _ => (0, Vec::new()),
            };
            let acl_bytes: usize = acl
                .iter()
                .map(|a| 12 + a.scheme().len() + a.id().len())
                .sum();
            // Each operation has a header of its own in the multi: type, done flag, error.
            size += REQUEST_OVERHEAD + 9 + namespace + op.path().len() + data + acl_bytes;
            prepared.push(Prepared { op, acl });
        }
        if size > MAX_PACKET {
            return Err(Error::invalid(format!(
                "a transaction of {} operations and about {size} bytes is over ZooKeeper's \
                 packet limit of {MAX_PACKET} bytes for the whole request (jute.maxbuffer)",
                ops.len()
            )));
        }
        Ok(prepared)
    }
}

/// Sends the transaction and reads the server's answer into one result per operation.
async fn commit(zk: zk::Client, ops: &[Prepared<'_>]) -> Result<Vec<OpResult>> {
    let mut multi = zk.new_multi_writer();
    for p in ops {
        let path = p.op.path();
        let added = match &p.op.0 {
            Kind::Check { version, .. } => multi.add_check_version(path, version.unwrap_or(-1)),
            Kind::Create { data, mode, .. } => {
                let options = mode.to_zk().with_acls(zk::Acls::new(&p.acl));
                multi.add_create(path, data, &options)
            }
            Kind::SetData { data, version, .. } => multi.add_set_data(path, data, *version),
            Kind::Delete { version, .. } => multi.add_delete(path, *version),
        };
        added.map_err(|e| Error::from_zk(e, path))?;
    }
    match multi.commit().await {
        Ok(results) => answers(ops, results),
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            Err(failed(ops.get(index).map(|p| p.op), index, source))
        }
        Err(zk::MultiWriteError::RequestFailed { source }) => Err(Error::from_zk(
            source,
            ops.first().map_or("/", |p| p.op.path()),
        )),
    }
}

/// The error of a transaction whose operation `index` the server refused with `source`.
fn failed(op: Option<&Op>, index: usize, source: zk::Error) -> Error {
    let Some(op) = op else {
        return Error::ZooKeeper(format!(
            "the server named operation {index} as failed, which the transaction does not have: \
             {source}"
        ));
    };
    Error::TransactionFailed {
        index,
        op: op.to_string(),
        source: Box::new(Error::from_zk(source, op.path())),
    }
}

/// One result per operation, or an error if the server's answer does not match the request.
fn answers(ops: &[Prepared<'_>], results: Vec<zk::MultiWriteResult>) -> Result<Vec<OpResult>> {
    if results.len() != ops.len() {
        return Err(Error::ZooKeeper(format!(
            "a transaction of {} operations was answered with {} results",
            ops.len(),
            results.len()
        )));
    }
    ops.iter()
        .zip(results)
        .map(|(p, result)| match (&p.op.0, result) {
            (Kind::Check { .. }, zk::MultiWriteResult::Check) => Ok(OpResult::Check),
            (Kind::Create { .. }, zk::MultiWriteResult::Create { path, stat }) => {
                Ok(OpResult::Create {
                    path,
                    stat: (!stat.is_invalid()).then(|| Stat::from_zk(stat)),
                })
            }
            (Kind::SetData { .. }, zk::MultiWriteResult::SetData { stat }) => {
                Ok(OpResult::SetData {
                    stat: Stat::from_zk(stat),
                })
            }
            (Kind::Delete { .. }, zk::MultiWriteResult::Delete) => Ok(OpResult::Delete),
            (_, other) => Err(Error::ZooKeeper(format!(
                "operation {} was answered with {other:?}",
                p.op
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_operations_are_refused_before_io() {
        let bad = [
            Op::check("relative", 0),
            Op::check("/a", -1),
            Op::set_data_version("/a", b"", -2),
            Op::delete_version("/a", -1),
            Op::delete("/"),
            Op::create("/", b"", CreateMode::Persistent),
            Op::set_data("/", b""),
            Op::create("/a/", b"", CreateMode::Persistent),
            Op::create_with_acl("/a", b"", CreateMode::Persistent, Vec::new()),
            Op::set_data("/a", &vec![0; 2 << 20]),
        ];
        for op in bad {
            let err = op.validate().unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(_) | Error::InvalidPath { .. }),
                "{op}: {err}"
            );
        }
        for op in [
            Op::check_exists("/"),
            Op::check("/a", 0),
            Op::create("/a/", b"", CreateMode::EphemeralSequential),
            Op::delete_version("/a", 7),
        ] {
            op.validate().unwrap();
        }
    }

    #[test]
    fn operations_describe_themselves() {
        assert_eq!(Op::check("/a", 2).to_string(), "check /a at version 2");
        assert_eq!(Op::check_exists("/a").to_string(), "check_exists /a");
        assert_eq!(
            Op::create("/a", b"", CreateMode::Ephemeral).to_string(),
            "create /a (Ephemeral)"
        );
        assert_eq!(Op::delete("/a").to_string(), "delete /a");
    }

    #[test]
    fn a_failure_names_its_operation_and_the_servers_reason() {
        let op = Op::set_data_version("/a", b"x", 3);
        let err = failed(Some(&op), 1, zk::Error::BadVersion);
        assert_eq!(
            err,
            Error::TransactionFailed {
                index: 1,
                op: "set_data /a at version 3".into(),
                source: Box::new(Error::BadVersion("/a".into())),
            }
        );
        assert!(err.to_string().contains("operation 1"));
        // An index the request does not have is an odd answer, not a panic.
        assert!(matches!(
            failed(None, 9, zk::Error::NoNode),
            Error::ZooKeeper(_)
        ));
    }

    #[test]
    fn an_answer_that_does_not_match_the_request_is_an_error() {
        let ops = [Op::check("/a", 0), Op::delete("/b")];
        let prepared: Vec<_> = ops
            .iter()
            .map(|op| Prepared {
                op,
                acl: Vec::new(),
            })
            .collect();
        let short = answers(&prepared, vec![zk::MultiWriteResult::Check]);
        assert!(matches!(short, Err(Error::ZooKeeper(_))));
        let swapped = answers(
            &prepared,
            vec![zk::MultiWriteResult::Delete, zk::MultiWriteResult::Check],
        );
        assert!(matches!(swapped, Err(Error::ZooKeeper(_))));
        let ok = answers(
            &prepared,
            vec![zk::MultiWriteResult::Check, zk::MultiWriteResult::Delete],
        );
        assert_eq!(ok.unwrap(), vec![OpResult::Check, OpResult::Delete]);
    }
}
