//! The operation catalogue: each ZooKeeper request as a blocking call (`delete`, `data`, ...)
//! and, for the recipes, within a caller's [`Call`] (`delete_in`, `data_in`, ...), plus the two
//! shapes the lock protocol needs: a setData sent without waiting, and a transaction.

use zookeeper_client as zk;

use super::{builder, Acl, Call, Client, Doomed, Signal, Stat};
use crate::core::error::{Error, Result};
use crate::zookeeper::path;

impl Client {
    /// Deletes a node, whatever its version.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent, [`NotEmpty`](Error::NotEmpty) if it has
    /// children.
    pub fn delete(&self, path: &str) -> Result<()> {
        self.delete_in(path, None, &mut self.user_call())
    }

    /// Deletes a node if its data version is `version`.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`], plus [`BadVersion`](Error::BadVersion) on a version mismatch.
    pub fn delete_version(&self, path: &str, version: i32) -> Result<()> {
        self.delete_in(path, Some(version), &mut self.user_call())
    }

    pub(crate) fn delete_in(
        &self,
        path: &str,
        version: Option<i32>,
        call: &mut Call,
    ) -> Result<()> {
        path::validate(path, false)?;
        self.run("delete", call, |zk, _| async move {
            zk.delete(path, version)
                .await
                .map_err(|e| Error::from_zk(e, path))
        })
    }

    /// Curator's guaranteed delete: deletes the node (a missing node counts as deleted); if that
    /// fails for lack of a connection or because the session expired under it, the error is
    /// returned and the delete is retried in the background, through whatever session is
    /// current, until the node is gone or the Client closes (an ephemeral node of the expired
    /// session is gone already: the retry finds nothing to delete).
    ///
    /// # Blocking and errors
    /// As [`delete`](Client::delete); a delete that cannot be confirmed goes on in the
    /// background until the node is gone, and the error is returned.
    pub fn delete_guaranteed(&self, path: &str) -> Result<()> {
        self.delete_guaranteed_in(path, &mut self.user_call())
    }

    pub(crate) fn delete_guaranteed_in(&self, path: &str, call: &mut Call) -> Result<()> {
        match self.delete_in(path, None, call) {
            Ok(()) | Err(Error::NoNode(_)) => Ok(()),
            Err(e) if e.outcome_unknown() || e == Error::SessionExpired => {
                self.delete_in_background(Doomed::node(path, None));
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The names of a node's children (unsorted, as the server returns them).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if the node is absent.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        self.children_in(path, &mut self.user_call())
    }

    pub(crate) fn children_in(&self, path: &str, call: &mut Call) -> Result<Vec<String>> {
        path::validate(path, false)?;
        self.run("children", call, |zk, _| async move {
            zk.list_children(path)
                .await
                .map_err(|e| Error::from_zk(e, path))
        })
    }

    /// A node's data and stat.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent.
    pub fn data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.data_in(path, &mut self.user_call())
    }

    pub(crate) fn data_in(&self, path: &str, call: &mut Call) -> Result<(Vec<u8>, Stat)> {
        path::validate(path, false)?;
        self.run("data", call, |zk, _| async move {
            let (data, stat) = zk
                .get_data(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((data, Stat::from_zk(stat)))
        })
    }

    /// Sends a setData at `version` before it returns, without waiting for the answer: a read
    /// sent after it sees the new data. The signal is set once the answer came (or failed, or
    /// there was no session to send it on).
    pub(crate) fn set_data_unawaited(&self, path: &str, data: &[u8], version: i32) -> Signal {
        let answered = Signal::default();
        let Some(zk) = self.shared().conn.lock().zk.clone() else {
            answered.set();
            return answered;
        };
        let sent = zk.set_data(path, data, Some(version));
        let path = path.to_owned();
        let done = answered.clone();
        self.shared().spawn(async move {
            if let Err(e) = sent.await {
                tracing::debug!("setData {path} (unawaited): {e}");
            }
            done.set();
        });
        answered
    }

    /// One attempt at `ops` as one transaction (ZooKeeper's multi): the stats of its setData
    /// operations (`None` for checks), or the index of the operation that failed and why.
    pub(crate) fn multi_once(&self, ops: &[MultiOp<'_>], call: &mut Call) -> Result<MultiOutcome> {
        self.run_once(call, |zk, _| async move {
            let mut multi = zk.new_multi_writer();
            for op in ops {
                match *op {
                    MultiOp::Check { path, version } => multi
                        .add_check_version(path, version)
                        .map_err(|e| Error::from_zk(e, path))?,
                    MultiOp::SetData {
                        path,
                        data,
                        version,
                    } => multi
                        .add_set_data(path, data, Some(version))
                        .map_err(|e| Error::from_zk(e, path))?,
                }
            }
            match multi.commit().await {
                Ok(results) => Ok(Ok(results
                    .into_iter()
                    .map(|r| match r {
                        zk::MultiWriteResult::SetData { stat } => Some(Stat::from_zk(stat)),
                        _ => None,
                    })
                    .collect())),
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    let path = ops.get(index).map_or("", MultiOp::path);
                    Ok(Err((index, Error::from_zk(source, path))))
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    let path = ops.first().map_or("", MultiOp::path);
                    Err(Error::from_zk(source, path))
                }
            }
        })
    }

    /// Sets a node's data, whatever its version; returns the new stat.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent; data over 1 MiB is refused before I/O.
    pub fn set_data(&self, path: &str, data: &[u8]) -> Result<Stat> {
        self.set_data_in(path, data, None, &mut self.user_call())
    }

    /// Sets a node's data if its version is `version`.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`], plus [`BadVersion`](Error::BadVersion) on a version mismatch.
    pub fn set_data_version(&self, path: &str, data: &[u8], version: i32) -> Result<Stat> {
        self.set_data_in(path, data, Some(version), &mut self.user_call())
    }

    pub(crate) fn set_data_in(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
        call: &mut Call,
    ) -> Result<Stat> {
        path::validate(path, false)?;
        self.check_request(path, data.len(), 0)?;
        self.run("set_data", call, |zk, _| async move {
            let stat = zk
                .set_data(path, data, version)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(Stat::from_zk(stat))
        })
    }

    /// A node's stat, or `None` if it does not exist. Sets no watch.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]; an absent node is `Ok(None)`, not an error.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.exists_in(path, &mut self.user_call())
    }

    pub(crate) fn exists_in(&self, path: &str, call: &mut Call) -> Result<Option<Stat>> {
        path::validate(path, false)?;
        self.run("exists", call, |zk, _| async move {
            let stat = zk
                .check_stat(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(stat.map(Stat::from_zk))
        })
    }

    /// A node's ACL and stat (Curator's `getACL()`).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent.
    pub fn acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        path::validate(path, false)?;
        self.run("acl", &mut self.user_call(), |zk, _| async move {
            let (acl, stat) = zk
                .get_acl(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((acl.iter().map(Acl::from_zk).collect(), Stat::from_zk(stat)))
        })
    }

    /// Replaces a node's ACL, whatever its ACL version (Curator's `setACL()`); returns the new
    /// stat. An empty ACL is refused before any I/O.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent; an invalid ACL is
    /// [`InvalidArgument`](Error::InvalidArgument).
    pub fn set_acl(&self, path: &str, acl: &[Acl]) -> Result<Stat> {
        path::validate(path, false)?;
        if acl.is_empty() {
            return Err(Error::invalid("ACL must not be empty"));
        }
        let acl: Vec<zk::Acl> = acl.iter().map(Acl::to_zk).collect();
        let acl = &acl;
        self.run("set_acl", &mut self.user_call(), |zk, _| async move {
            let stat = zk
                .set_acl(path, acl, None)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(Stat::from_zk(stat))
        })
    }

    /// Adds authentication to the session (Curator's `addAuthInfo`), e.g. `("digest",
    /// b"user:password")`: the current session is authenticated at once, and every session the
    /// Client opens later (after expiry) is too. Nodes created earlier keep the ACLs they were
    /// created with.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any I/O for an empty scheme or a digest without `:`.
    /// If the server refuses the authentication it ends the session (ZooKeeper's
    /// `AuthFailed`): the error is returned and the authentication is not kept.
    ///
    /// # Blocking
    /// One round trip, within the Client's retry policy.
    pub fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<()> {
        builder::check_auth(scheme, auth)?;
        let entry = (scheme.to_owned(), auth.to_vec());
        // Kept first, so a session opened meanwhile gets it too.
        self.shared().added_auth.lock().push(entry.clone());
        let result = self.run("add_auth", &mut self.user_call(), |zk, _| async move {
            zk.auth(scheme, auth)
                .await
                .map_err(|e| Error::from_zk(e, scheme))
        });
        if let Err(e) = &result {
            if !e.is_retryable() {
                let mut added = self.shared().added_auth.lock();
                if let Some(i) = added.iter().rposition(|a| *a == entry) {
                    added.remove(i);
                }
            }
        }
        result
    }

    /// Waits until the server this Client is connected to has caught up with the leader.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`].
    pub fn sync(&self, path: &str) -> Result<()> {
        path::validate(path, false)?;
        self.run("sync", &mut self.user_call(), |zk, _| async move {
            zk.sync(path).await.map_err(|e| Error::from_zk(e, path))
        })
    }
}

/// What a transaction the server answered did: the stats of its setData operations (`None` for
/// checks), or the index of the operation that failed and why.
pub(crate) type MultiOutcome = std::result::Result<Vec<Option<Stat>>, (usize, Error)>;

/// One operation of [`Client::multi_once`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum MultiOp<'a> {
    /// Fails the transaction unless the node's data version is `version`.
    Check { path: &'a str, version: i32 },
    /// Sets the node's data if its version is `version`.
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: i32,
    },
}

impl MultiOp<'_> {
    fn path(&self) -> &str {
        match self {
            MultiOp::Check { path, .. } | MultiOp::SetData { path, .. } => path,
        }
    }
}
