//! The parents of a node to create: the ACL each ancestor gets, the parents a Client has seen
//! exist, and `mkdirs`, which creates whatever ancestors are missing.

use std::collections::HashSet;

use zookeeper_client as zk;

use crate::core::error::{Error, Result};
use crate::zookeeper::path;

/// The ACL for each of a few paths.
pub(crate) type PathAcls = Vec<(String, Vec<zk::Acl>)>;

/// `path`'s proper ancestors but the root, each with the ACL `acl` gives it.
pub(crate) fn ancestor_acls(path: &str, acl: impl Fn(&str) -> Vec<zk::Acl>) -> PathAcls {
    let mut out = Vec::new();
    let mut at = path::parent(path);
    while at != "/" {
        out.push((at.to_owned(), acl(at)));
        at = path::parent(at);
    }
    out
}

/// The ACL worked out for `path`.
pub(crate) fn looked_up(acls: &PathAcls, path: &str) -> Vec<zk::Acl> {
    acls.iter()
        .find(|(p, _)| p == path)
        .map(|(_, acl)| acl.clone())
        .unwrap_or_default()
}

/// The parents a Client has seen exist, so that a create with missing parents made as
/// containers sends their creates only for paths it has not seen (a bounded set: up to
/// [`KNOWN_PARENTS`] recent paths in each of two generations; a path found in the older one
/// moves to the newer, and the older is dropped when the newer is full). A container reaped
/// since makes our create fail with NoNode, and the create is sent again behind its parents'.
#[derive(Default)]
pub(crate) struct KnownParents(parking_lot::Mutex<Generations>);

#[derive(Default)]
struct Generations {
    current: HashSet<String>,
    previous: HashSet<String>,
}

/// Paths in each generation of [`KnownParents`].
const KNOWN_PARENTS: usize = 4096;

impl Generations {
    fn contains(&mut self, path: &str) -> bool {
        if self.current.contains(path) {
            return true;
        }
        match self.previous.take(path) {
            Some(path) => {
                self.add(path);
                true
            }
            None => false,
        }
    }

    fn add(&mut self, path: String) {
        if self.current.len() >= KNOWN_PARENTS {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(path);
    }
}

impl KnownParents {
    /// `dir` and its ancestors not known to exist (but the root), topmost first, each with
    /// its ACL from `acls`; one without an ACL is left out (the fallback reports it).
    pub(super) fn unknown_ancestors(&self, dir: &str, acls: &PathAcls) -> PathAcls {
        let mut known = self.0.lock();
        let mut out = Vec::new();
        let mut at = dir;
        while at != "/" && !known.contains(at) {
            let acl = looked_up(acls, at);
            if !acl.is_empty() {
                out.push((at.to_owned(), acl));
            }
            at = path::parent(at);
        }
        out.reverse();
        out
    }

    /// `dir` exists, and so does every ancestor.
    pub(super) fn insert(&self, dir: &str) {
        let mut known = self.0.lock();
        let mut at = dir;
        while at != "/" && !known.contains(at) {
            known.add(at.to_owned());
            at = path::parent(at);
        }
    }

    /// `dir` may be gone, and its ancestors with it (a container reaped once empty).
    pub(super) fn forget(&self, dir: &str) {
        let mut known = self.0.lock();
        let mut at = dir;
        while at != "/" {
            known.current.remove(at);
            known.previous.remove(at);
            at = path::parent(at);
        }
    }
}

/// Creates `path` and whatever of its ancestors is missing, each with the ACL `acl` gives its
/// path (Curator's `ZKPaths.mkdirs`). It asks `exists` from `path` upwards first and creates only
/// below the deepest node that exists: ZooKeeper checks the parent's CREATE permission before it
/// answers NodeExists, so a create on an existing node the caller may not create under would
/// fail with NoAuth. A NoAuth names the path it was refused on.
pub(crate) async fn mkdirs(
    zk: &zk::Client,
    path: &str,
    mode: zk::CreateMode,
    acl: &(dyn Fn(&str) -> Vec<zk::Acl> + Sync),
) -> Result<()> {
    let acl = |p: &str| {
        let acl = acl(p);
        if acl.is_empty() {
            Err(Error::invalid(format!("no ACL for {p}")))
        } else {
            Ok(acl)
        }
    };
    // A container above may be reaped between our look and our create: look again, a few times.
    for _ in 0..3 {
        let mut missing = Vec::new();
        let mut at = path;
        while at != "/" {
            match zk.check_stat(at).await {
                Ok(Some(_)) => break,
                Ok(None) => missing.push(at),
                Err(e) => return Err(Error::from_zk(e, at)),
            }
            at = path::parent(at);
        }
        let mut reaped = false;
        for dir in missing.into_iter().rev() {
            let acl = acl(dir)?;
            let options = mode.with_acls(zk::Acls::new(&acl));
            match zk.create(dir, &[], &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(zk::Error::NoNode) => {
                    reaped = true;
                    break;
                }
                Err(e) => return Err(Error::from_zk(e, dir)),
            }
        }
        if !reaped {
            return Ok(());
        }
    }
    Err(Error::NoNode(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acls(path: &str) -> PathAcls {
        let anyone = zk::AuthId::new("world", "anyone");
        ancestor_acls(path, |_| {
            vec![zk::Acl::new(zk::Permission::ALL, anyone.clone())]
        })
    }

    fn paths(acls: &PathAcls) -> Vec<&str> {
        acls.iter().map(|(p, _)| p.as_str()).collect()
    }

    #[test]
    fn unknown_parents_are_listed_topmost_first_down_to_the_first_known_one() {
        let known = KnownParents::default();
        let all = acls("/a/b/c/_c_x-lock-");
        assert_eq!(
            paths(&known.unknown_ancestors("/a/b/c", &all)),
            ["/a", "/a/b", "/a/b/c"]
        );
        known.insert("/a/b");
        assert_eq!(paths(&known.unknown_ancestors("/a/b/c", &all)), ["/a/b/c"]);
        known.insert("/a/b/c");
        assert!(known.unknown_ancestors("/a/b/c", &all).is_empty());
        // A reaped container may have taken its empty parents with it.
        known.forget("/a/b/c");
        assert_eq!(paths(&known.unknown_ancestors("/a/b/c", &all)).len(), 3);
    }

    #[test]
    fn a_parent_without_an_acl_is_left_to_the_fallback() {
        let known = KnownParents::default();
        let mut all = acls("/a/b/n");
        all.retain(|(p, _)| p != "/a");
        assert_eq!(paths(&known.unknown_ancestors("/a/b", &all)), ["/a/b"]);
    }

    #[test]
    fn known_parents_stay_bounded_and_keep_the_recently_used() {
        let known = KnownParents::default();
        known.insert("/hot");
        for i in 0..3 * KNOWN_PARENTS {
            known.insert(&format!("/p{i}"));
            if i % 1000 == 0 {
                // In use: moved to the newer generation whenever found in the older.
                assert!(known.unknown_ancestors("/hot", &acls("/hot/n")).is_empty());
            }
        }
        let held = {
            let g = known.0.lock();
            g.current.len() + g.previous.len()
        };
        assert!(held <= 2 * KNOWN_PARENTS, "{held}");
        assert!(known.unknown_ancestors("/hot", &acls("/hot/n")).is_empty());
        assert_eq!(known.unknown_ancestors("/p0", &acls("/p0/n")).len(), 1);
    }
}
