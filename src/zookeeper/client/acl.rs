//! ACL providers (Curator's `ACLProvider`) and ZooKeeper's `digest` identities.

use std::sync::Arc;

use super::types::{Acl, Perms};

/// Chooses the ACL of every node a [`Client`](crate::Client) or a recipe creates: lock nodes,
/// the parents created for them, and the namespace (Curator's `ACLProvider`).
///
/// `path` is the node's full path as the server sees it, namespace included (Curator's). An
/// empty list from [`acl_for_path`](AclProvider::acl_for_path) means "the default".
///
/// # Recommended set-up for locks
/// Lock nodes creator-only ([`Acl::creator_all`]), so no other identity can delete them, write a
/// revocation request into them or change their data; the lock's parents readable by everyone
/// and fully open to the identities allowed to queue. ZooKeeper checks a delete against the
/// *parent's* ACL: an identity with `DELETE` on the lock path can delete any contender's node,
/// so give `CREATE`/`DELETE` on it only to identities you trust to queue.
///
/// Creator-only lock nodes suit contenders that share **one identity**. A contender reads the
/// node ahead of it in the queue (a getData with a watch, which needs `READ`), so contenders of
/// several identities need lock nodes that each of them can read: add a `READ` entry per
/// identity (`Acl::digest(user, password, Perms::READ)`), or [`Acl::read_unsafe`]. Without it a
/// contender queued behind another identity's node fails with
/// [`Error::NoAuth`](crate::Error::NoAuth) naming the node it could not read.
///
/// # Example
/// ```
/// use zklock::{Acl, AclProvider};
/// use zklock::zookeeper::Perms;
///
/// /// Lock nodes (under `/locks/…/`) creator-only; everything else readable by all.
/// struct Locks;
///
/// impl AclProvider for Locks {
///     fn default_acl(&self) -> Vec<Acl> {
///         vec![Acl::creator_all(), Acl::read_unsafe()]
///     }
///     fn acl_for_path(&self, path: &str) -> Vec<Acl> {
///         if path.rsplit('/').next().is_some_and(|name| name.starts_with("_c_")) {
///             vec![Acl::creator_all()]
///         } else {
///             self.default_acl()
///         }
///     }
/// }
/// let client = zklock::Client::builder("127.0.0.1:2181")
///     .digest_auth("app", "secret")
///     .acl_provider(Locks);
/// ```
pub trait AclProvider: Send + Sync + 'static {
    /// The ACL for nodes the provider has nothing specific for; must not be empty.
    fn default_acl(&self) -> Vec<Acl>;

    /// The ACL for the node at `path` (default: [`default_acl`](AclProvider::default_acl)).
    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        let _ = path;
        self.default_acl()
    }
}

/// One ACL for every node.
impl AclProvider for Vec<Acl> {
    fn default_acl(&self) -> Vec<Acl> {
        self.clone()
    }
}

/// A shared provider, for the Client and for recipes.
pub(crate) type SharedAcl = Arc<dyn AclProvider>;

/// A recipe builder's own provider, if it was given one (debug-printable).
#[derive(Clone, Default)]
pub(crate) struct RecipeAcl(pub(crate) Option<SharedAcl>);

impl std::fmt::Debug for RecipeAcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "own AclProvider",
            None => "the Client's AclProvider",
        })
    }
}

/// A provider with the namespace its paths are in: what a create (maybe in the background)
/// needs to pick the ACL of the node and of each parent it makes.
#[derive(Clone)]
pub(crate) struct AclSource {
    pub(crate) provider: SharedAcl,
    pub(crate) namespace: Option<String>,
}

impl AclSource {
    /// The wire ACL for `path`, a path within the namespace.
    pub(crate) fn zk_acl(&self, path: &str) -> Vec<zookeeper_client::Acl> {
        let full = match (&self.namespace, path) {
            (Some(ns), "/") => ns.clone(),
            (Some(ns), p) => format!("{ns}{p}"),
            (None, p) => p.to_owned(),
        };
        acl_for(&*self.provider, &full)
            .iter()
            .map(Acl::to_zk)
            .collect()
    }
}

/// The ACL `provider` gives `path` (namespace included), its default if it gives none.
pub(crate) fn acl_for(provider: &dyn AclProvider, path: &str) -> Vec<Acl> {
    let acl = provider.acl_for_path(path);
    if acl.is_empty() {
        provider.default_acl()
    } else {
        acl
    }
}

impl Acl {
    /// An entry granting `perms` to the `digest` identity of `user` with `password`: the id is
    /// `user:base64(sha1("user:password"))`, as ZooKeeper's `DigestAuthenticationProvider`
    /// computes it. A session has this identity after
    /// [`ClientBuilder::digest_auth`](crate::ClientBuilder::digest_auth) (or
    /// [`Client::add_auth`](crate::Client::add_auth)) with the same user and password.
    ///
    /// ```
    /// use zklock::Acl;
    /// use zklock::zookeeper::Perms;
    /// let acl = Acl::digest("user", "pw", Perms::ALL);
    /// assert_eq!(acl.id(), "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=");
    /// ```
    pub fn digest(user: &str, password: &str, perms: Perms) -> Acl {
        Acl::new(perms, "digest", &digest_id(user, password))
    }
}

/// ZooKeeper's digest id for `user` and `password`.
pub(crate) fn digest_id(user: &str, password: &str) -> String {
    let hash = sha1(format!("{user}:{password}").as_bytes());
    format!("{user}:{}", base64(&hash))
}

/// SHA-1 (FIPS 180-4). Only for ZooKeeper's digest ids, whose format fixes the hash; twenty
/// lines here rather than a dependency.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_ids_match_zookeeper() {
        // Vectors from `openssl dgst -sha1 -binary | base64`.
        assert_eq!(base64(&sha1(b"")), "2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
        assert_eq!(base64(&sha1(&[b'a'; 1000])), "KR6abGaZSUm1e6XmUDYemPw2sbo=");
        assert_eq!(digest_id("user", "pw"), "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }

    #[test]
    fn an_empty_answer_means_the_default() {
        struct P;
        impl AclProvider for P {
            fn default_acl(&self) -> Vec<Acl> {
                vec![Acl::read_unsafe()]
            }
            fn acl_for_path(&self, path: &str) -> Vec<Acl> {
                if path == "/x" {
                    vec![Acl::creator_all()]
                } else {
                    vec![]
                }
            }
        }
        assert_eq!(acl_for(&P, "/x"), vec![Acl::creator_all()]);
        assert_eq!(acl_for(&P, "/y"), vec![Acl::read_unsafe()]);
        assert_eq!(
            acl_for(&vec![Acl::open_unsafe()], "/z"),
            vec![Acl::open_unsafe()]
        );
        let source = AclSource {
            provider: Arc::new(P),
            namespace: Some("/ns".into()),
        };
        let creator = vec![Acl::creator_all().to_zk()];
        assert_ne!(source.zk_acl("/x"), creator);
        let source = AclSource {
            namespace: None,
            ..source
        };
        assert_eq!(source.zk_acl("/x"), creator);
    }
}
