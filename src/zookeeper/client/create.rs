//! Creating nodes: Curator's `create()` builder ([`Create`]), the spec every create is made
//! from, missing parents made as containers (sent in the create's round trip for parents the
//! Client has not seen, `mkdirs` when that was not enough: `parents.rs`), and Curator's
//! protected create, which finds its node after a lost reply instead of making a second one.

use std::sync::Arc;

use zookeeper_client as zk;

use super::acl::{AclSource, SharedAcl};
use super::limits::check_data;
use super::parents::{ancestor_acls, looked_up, mkdirs, KnownParents, PathAcls};
use super::runtime::Handoff;
use super::types::{Acl, CreateMode, Stat};
use super::{cleanup, Call, Client, Doomed};
use crate::core::error::{Error, Result};
use crate::zookeeper::path::{self, Layout};

/// A node to create.
#[derive(Clone, Copy)]
pub(crate) struct NodeSpec<'a> {
    pub(crate) path: &'a str,
    pub(crate) data: &'a [u8],
    pub(crate) mode: CreateMode,
    /// The node's ACL; `None`: what the provider gives its path.
    pub(crate) acl: Option<&'a [Acl]>,
    /// The provider for the node (when `acl` is `None`) and the parents it creates; `None`: the
    /// Client's.
    pub(crate) provider: Option<&'a SharedAcl>,
    /// Create missing parents (as containers, or persistent in kazoo's layout).
    pub(crate) parents: bool,
    /// A protected create (`_c_<uuid>-` name): if the caller stops waiting for its answer, what
    /// it made is deleted in the background.
    pub(crate) protected: bool,
    /// Where to put the parent's children, listed right behind the create (see [`Siblings`]).
    pub(crate) siblings: Option<&'a Siblings>,
    /// The protection id's form and how missing parents are made.
    pub(crate) layout: Layout,
}

/// The children of a created node's parent, listed with a request sent right behind the create
/// in the same session, without waiting for the create's answer: the server answers requests of
/// a session in order, so the listing includes the new node and everything created before it —
/// what a listing sent after the answer would show, one round trip sooner. Left empty when the
/// create or the listing failed, or the node was made another way (after a look for where a
/// path ends, or found after a lost reply).
pub(crate) type Siblings = Arc<parking_lot::Mutex<Option<Vec<String>>>>;

impl std::fmt::Debug for NodeSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .field("acl", &self.acl)
            .field("own_provider", &self.provider.is_some())
            .field("parents", &self.parents)
            .field("protected", &self.protected)
            .finish_non_exhaustive()
    }
}

impl NodeSpec<'_> {
    pub(crate) fn validate(&self) -> Result<()> {
        path::validate(self.path, self.mode.is_sequential())?;
        if self.path == "/" {
            return Err(Error::InvalidPath {
                path: "/".into(),
                reason: "the root exists already",
            });
        }
        check_data(self.data)?;
        if self.acl.is_some_and(|a| a.is_empty()) {
            return Err(Error::invalid("ACL must not be empty"));
        }
        Ok(())
    }
}

/// A [`NodeSpec`] that a background task can own.
struct OwnedSpec {
    path: String,
    data: Vec<u8>,
    mode: CreateMode,
    acl: Vec<zk::Acl>,
    /// The ACL of each ancestor, when missing parents are to be created: worked out on the
    /// caller's thread, so a user's provider never runs on the I/O thread; and the parents the
    /// Client knows exist.
    parents: Option<(PathAcls, Arc<KnownParents>)>,
    /// How missing parents are made: containers, or persistent in kazoo's layout.
    parent_mode: zk::CreateMode,
    siblings: Option<Siblings>,
}

impl OwnedSpec {
    async fn create(self, zk: zk::Client) -> Result<(String, Stat)> {
        let options = self.mode.to_zk().with_acls(zk::Acls::new(&self.acl));
        let parent = path::parent(&self.path);
        let result = match &self.parents {
            Some((acls, known)) => {
                let unknown = known.unknown_ancestors(parent, acls);
                let mut result = self.send(&zk, &options, &unknown).await;
                if unknown.len() < acls.len() && matches!(result, Err(zk::Error::NoNode)) {
                    // A parent we knew of was reaped since (an empty container), and maybe
                    // its own parents with it.
                    known.forget(parent);
                    let unknown = known.unknown_ancestors(parent, acls);
                    result = self.send(&zk, &options, &unknown).await;
                }
                if let Err(zk::Error::NoNode) = result {
                    // A parent we may not create, or one reaped between our creates: look
                    // where the path ends and create below it (a NoAuth names its path).
                    mkdirs(&zk, parent, self.parent_mode, &|p| looked_up(acls, p)).await?;
                    result = zk.create(&self.path, &self.data, &options).await;
                }
                if result.is_ok() {
                    known.insert(parent);
                }
                result
            }
            None => self.send(&zk, &options, &[]).await,
        };
        let (stat, seq) = result.map_err(|e| Error::from_zk(e, &self.path))?;
        let created = if self.mode.is_sequential() {
            format!("{}{seq}", self.path)
        } else {
            self.path
        };
        Ok((created, Stat::from_zk(stat)))
    }

    /// Sends the creates of `parents` (made as `parent_mode` says, topmost first), our create and the listing
    /// of our siblings without waiting between them, and awaits their answers. The server
    /// answers a session's requests in order, so the parents exist (or failed to be made)
    /// before our create is applied: a parent answered NodeExists — or NoAuth on a parent that
    /// exists but we may not create under — costs nothing more, and our create's own answer
    /// says whether the path is there.
    async fn send(
        &self,
        zk: &zk::Client,
        options: &zk::CreateOptions<'_>,
        parents: &[(String, Vec<zk::Acl>)],
    ) -> std::result::Result<(zk::Stat, zk::CreateSequence), zk::Error> {
        let parent_creates: Vec<_> = parents
            .iter()
            .map(|(dir, acl)| {
                let options = self.parent_mode.with_acls(zk::Acls::new(acl));
                zk.create(dir, &[], &options)
            })
            .collect();
        let create = zk.create(&self.path, &self.data, options);
        let listing = self
            .siblings
            .as_ref()
            .map(|_| zk.list_children(path::parent(&self.path)));
        for parent in parent_creates {
            let _ = parent.await;
        }
        let result = create.await;
        if let (Some(slot), Some(listing), Ok(_)) = (&self.siblings, listing, &result) {
            *slot.lock() = listing.await.ok();
        }
        result
    }
}

/// The calls a protected create needs: the Client makes them against the server, and the lock
/// algorithm's unit tests in memory with injected faults.
pub(crate) trait NodeOps: Send + Sync {
    /// One attempt at a create: only the caller knows how to recover a lost reply.
    fn create_once(&self, spec: &NodeSpec<'_>, call: &mut Call) -> Result<(String, Stat)>;
    /// Sleeps for the next retry, or gives the error back when the budget is spent.
    fn backoff(&self, call: &mut Call, err: Error) -> Result<()>;
    fn children(&self, path: &str, call: &mut Call) -> Result<Vec<String>>;
    fn stat(&self, path: &str, call: &mut Call) -> Result<Option<Stat>>;
    /// The current session's id, if one is open.
    fn session_id(&self) -> Option<i64>;
    /// Guaranteed delete, in the background, through whatever session is current.
    fn delete_background(&self, doomed: Doomed);
}

impl NodeOps for Client {
    fn create_once(&self, spec: &NodeSpec<'_>, call: &mut Call) -> Result<(String, Stat)> {
        self.create_attempt(spec, call)
    }

    fn backoff(&self, call: &mut Call, err: Error) -> Result<()> {
        Client::backoff(self, call, err)
    }

    fn children(&self, path: &str, call: &mut Call) -> Result<Vec<String>> {
        self.children_in(path, call)
    }

    fn stat(&self, path: &str, call: &mut Call) -> Result<Option<Stat>> {
        self.exists_in(path, call)
    }

    fn session_id(&self) -> Option<i64> {
        Client::session_id(self)
    }

    fn delete_background(&self, doomed: Doomed) {
        self.delete_in_background(doomed);
    }
}

impl Client {
    pub(crate) fn create_attempt(
        &self,
        spec: &NodeSpec<'_>,
        call: &mut Call,
    ) -> Result<(String, Stat)> {
        let config = &self.shared().config;
        let source = AclSource {
            provider: spec.provider.unwrap_or(&config.acl).clone(),
            namespace: config.namespace.clone(),
        };
        let acl: Vec<zk::Acl> = match spec.acl {
            Some(acl) => acl.iter().map(Acl::to_zk).collect(),
            None => source.zk_acl(spec.path),
        };
        if acl.is_empty() {
            return Err(Error::invalid(format!("no ACL for {}", spec.path)));
        }
        // Each entry: its permissions, and its scheme and id with their lengths.
        let acl_bytes = acl
            .iter()
            .map(|a| 12 + a.scheme().len() + a.id().len())
            .sum();
        self.check_request(spec.path, spec.data.len(), acl_bytes)?;
        if acl.iter().any(|a| a.scheme() == "auth") && !self.shared().has_credentials() {
            return Err(Error::invalid(format!(
                "the ACL for {} grants the creator (`auth`, e.g. Acl::creator_all()), but this \
                 Client has no credentials: add them with ClientBuilder::digest_auth / auth or \
                 Client::add_auth",
                spec.path
            )));
        }
        let owned = OwnedSpec {
            path: spec.path.to_owned(),
            data: spec.data.to_vec(),
            mode: spec.mode,
            acl,
            parents: spec.parents.then(|| {
                (
                    ancestor_acls(spec.path, |p| source.zk_acl(p)),
                    self.shared().known_parents.clone(),
                )
            }),
            parent_mode: match spec.layout {
                Layout::Curator => zk::CreateMode::Container,
                Layout::Kazoo => zk::CreateMode::Persistent,
            },
            siblings: spec.siblings.cloned(),
        };
        if !spec.protected {
            return self.run_once(call, |zk, _| owned.create(zk));
        }
        // The request is on its way once sent, whether or not we wait for its answer: a create
        // queued behind a reconnect may be applied seconds after this attempt gave up. So the
        // answer is awaited in the background, and a node nobody took is deleted.
        let shared = self.shared_arc().clone();
        self.run_once(call, move |zk, _| {
            let prefix = owned.path.clone();
            let (tx, rx) = Handoff::new(move |orphan: Result<(String, Stat)>| match orphan {
                Ok((node, stat)) => {
                    tracing::debug!("{node} was created after its caller gave up; deleting it");
                    cleanup::spawn(&shared, Doomed::node(&node, Some(stat.ephemeral_owner)))
                }
                Err(e) if e.outcome_unknown() => {
                    cleanup::spawn(&shared, Doomed::protected(&prefix))
                }
                Err(_) => {}
            });
            self.shared()
                .spawn(async move { tx.send(owned.create(zk).await) });
            async move { rx.recv().await.unwrap_or(Err(Error::Closed)) }
        })
    }
}

/// Curator's protected create: the name gets a fresh `_c_<uuid>-` prefix, so that after a lost
/// reply the retry finds the node the server did make instead of making a second one.
pub(crate) fn create_protected<S: NodeOps + ?Sized>(
    store: &S,
    spec: &NodeSpec<'_>,
    call: &mut Call,
) -> Result<(String, Stat)> {
    let target = path::protected(spec.path, &spec.layout.new_id());
    let spec = NodeSpec {
        path: &target,
        protected: true,
        ..*spec
    };
    let mut reply_lost = false;
    let outcome = loop {
        if reply_lost {
            match find_protected(store, &spec, call) {
                Ok(Some(found)) => break Ok(found),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        }
        match store.create_once(&spec, call) {
            Err(e) if e.is_retryable() => {
                reply_lost = true;
                if let Err(e) = store.backoff(call, e) {
                    break Err(e);
                }
            }
            Err(e) => {
                reply_lost |= e.outcome_unknown();
                break Err(e);
            }
            ok => break ok,
        }
    };
    // Given up with a create that the server may have applied: find that node by its
    // protection id and delete it, or it would sit in our live session at the queue's head.
    if outcome.is_err() && reply_lost {
        store.delete_background(Doomed::protected(&target));
    }
    outcome
}

/// Our node after a lost reply, if the server made it. An ephemeral node is adopted only if it
/// belongs to the current session; one of an earlier session is deleted (CURATOR-45/498).
fn find_protected<S: NodeOps + ?Sized>(
    store: &S,
    spec: &NodeSpec<'_>,
    call: &mut Call,
) -> Result<Option<(String, Stat)>> {
    let parent = path::parent(spec.path);
    let prefix = path::name(spec.path);
    let children = match store.children(parent, call) {
        Ok(c) => c,
        Err(Error::NoNode(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) else {
        return Ok(None);
    };
    let found = path::join(parent, &name);
    let Some(stat) = store.stat(&found, call)? else {
        return Ok(None);
    };
    if spec.mode.is_ephemeral() && Some(stat.ephemeral_owner) != store.session_id() {
        store.delete_background(Doomed::node(&found, Some(stat.ephemeral_owner)));
        return Ok(None);
    }
    Ok(Some((found, stat)))
}

/// A node creation being set up by [`Client::create`] (Curator's `create()` builder).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// use zklock::{Acl, CreateMode};
/// let path = client
///     .create("/locks/job/lock-")
///     .mode(CreateMode::EphemeralSequential)
///     .parents_as_containers()
///     .protected()
///     .acl(vec![Acl::open_unsafe()])
///     .call()?;
/// # Ok(()) }
/// ```
#[must_use = "nothing is created until `call()`"]
#[derive(Debug)]
pub struct Create<'a> {
    client: &'a Client,
    path: &'a str,
    mode: CreateMode,
    data: Option<&'a [u8]>,
    acl: Option<Vec<Acl>>,
    parents: bool,
    protected: bool,
}

impl<'a> Create<'a> {
    pub(super) fn new(client: &'a Client, path: &'a str) -> Self {
        Create {
            client,
            path,
            mode: CreateMode::Persistent,
            data: None,
            acl: None,
            parents: false,
            protected: false,
        }
    }

    /// The node's mode (default `Persistent`).
    pub fn mode(mut self, mode: CreateMode) -> Self {
        self.mode = mode;
        self
    }

    /// The node's data (default: the Client's default data).
    pub fn data(mut self, data: &'a [u8]) -> Self {
        self.data = Some(data);
        self
    }

    /// The node's ACL (default: what the Client's [`AclProvider`](crate::AclProvider) gives its
    /// path). Parents made by [`parents_as_containers`](Self::parents_as_containers) still get
    /// the provider's ACL for their own paths (Curator's `withACL(acl)` without
    /// `applyToParents`).
    pub fn acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = Some(acl);
        self
    }

    /// Create missing parents as containers (Curator's `creatingParentContainersIfNeeded`).
    pub fn parents_as_containers(mut self) -> Self {
        self.parents = true;
        self
    }

    /// Curator's `withProtection`: prefix the name with `_c_<uuid>-` so that, when a reply is
    /// lost, the retry finds the node this call made instead of making a second one.
    pub fn protected(mut self) -> Self {
        self.protected = true;
        self
    }

    /// Creates the node; returns its path (with the sequence for sequential modes).
    ///
    /// # Blocking and errors
    /// One call (parents first, when asked), bounded by the retry policy and the operation
    /// timeout; errors as listed on [`Client`]: [`NodeExists`](Error::NodeExists) for a
    /// non-sequential node that exists, [`NoNode`](Error::NoNode) for a missing parent without
    /// `parents_as_containers`, [`NoChildrenForEphemerals`](Error::NoChildrenForEphemerals) under
    /// an ephemeral parent. A protected create whose reply was lost finds its node instead of
    /// making a second one.
    pub fn call(self) -> Result<String> {
        let mut call = self.client.user_call();
        self.call_in(&mut call).map(|(path, _)| path)
    }

    /// Creates the node within a recipe's call; returns its path and stat.
    pub(crate) fn call_in(self, call: &mut Call) -> Result<(String, Stat)> {
        let client = self.client;
        let config = &client.shared().config;
        let spec = NodeSpec {
            path: self.path,
            data: self.data.unwrap_or(&config.default_data),
            mode: self.mode,
            acl: self.acl.as_deref(),
            provider: None,
            parents: self.parents,
            protected: false,
            siblings: None,
            layout: Layout::Curator,
        };
        spec.validate()?;
        if self.protected {
            return create_protected(client, &spec, call);
        }
        loop {
            match client.create_once(&spec, call) {
                Err(e) if e.is_retryable() => client.backoff(call, e)?,
                other => return other,
            }
        }
    }
}
