//! `ClientBuilder`: everything a Client is configured with, checked before any I/O.

use std::sync::Arc;
use std::time::Duration;

use super::acl::{AclProvider, AclSource, SharedAcl};
use super::config::{Config, TlsConfig};
use super::hosts::{parse_hosts, probe, probe_tls, refused_by_every_host, TCP_PREFIX, TLS_PREFIX};
use super::limits::MAX_DATA_LEN;
use super::types::{Acl, ErrorPolicy};
use super::Client;
use crate::core::error::{Error, Result};
use crate::core::options::Options;
use crate::core::retry::{ExponentialBackoffRetry, RetryPolicy};
use crate::zookeeper::path;

/// Builds a [`Client`] (Curator's `CuratorFrameworkFactory.builder()`).
///
/// Defaults: session timeout 30 s, connection timeout 10 s (as on every backend:
/// [`DEFAULT_SESSION_TIMEOUT`](crate::DEFAULT_SESSION_TIMEOUT),
/// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)), `ExponentialBackoffRetry(1 s, 3)`
/// (Curator's recipe defaults), no namespace, no auth, ACL `world:anyone` all, default node data
/// = this host's IP address as text (Curator's), no per-operation timeout.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::Client::builder("zk1:2181,zk2:2181,zk3:2181")
///     .session_timeout(Duration::from_secs(10))
///     .connection_timeout(Duration::from_secs(5))
///     .retry_policy(zklock::RetryNTimes::new(5, Duration::from_millis(500))?)
///     .namespace("myapp")
///     .digest_auth("app", "secret")
///     .connect()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClientBuilder {
    pub(crate) connect_string: String,
    pub(crate) options: Options,
    pub(crate) namespace: Option<String>,
    pub(crate) auth: Vec<(String, Vec<u8>)>,
    pub(crate) acl: SharedAcl,
    pub(crate) default_data: Option<Vec<u8>>,
    pub(crate) can_be_read_only: bool,
    pub(crate) error_policy: ErrorPolicy,
    pub(crate) ensemble_tracker: bool,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<super::tls::TlsSettings>,
    #[cfg(feature = "sasl-digest-md5")]
    pub(crate) sasl: Option<(String, String)>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("connect_string", &self.connect_string)
            .field("options", &self.options)
            .field("namespace", &self.namespace)
            .field(
                "auth_schemes",
                &self.auth.iter().map(|a| &a.0).collect::<Vec<_>>(),
            )
            .field("tls", &self.uses_tls())
            .field("ensemble_tracker", &self.ensemble_tracker)
            .finish_non_exhaustive()
    }
}

// The shared options. The session timeout is asked of the server (it may grant less or more,
// within its bounds; `Duration::MAX` asks for the server's maximum; zero is refused). The
// connect timeout is how long one attempt waits for a connection before it counts as a
// `ConnectionLoss` for the retry policy, and how long a silent connection lasts before it
// counts as lost: zero or more than a day is refused. The operation timeout bounds the
// Client's own calls (none by default: the retry policy bounds them; recipes pass their own
// deadlines; more than a day is none). The retry policy's default is Curator's for its
// recipes, exponential backoff from 1 s, 3 retries.
crate::core::options::connection_options!(ClientBuilder);

impl ClientBuilder {
    pub(crate) fn new(connect_string: &str) -> ClientBuilder {
        ClientBuilder {
            connect_string: connect_string.to_owned(),
            options: Options::default(),
            namespace: None,
            auth: Vec::new(),
            acl: Arc::new(vec![Acl::open_unsafe()]),
            default_data: None,
            can_be_read_only: false,
            error_policy: ErrorPolicy::Standard,
            ensemble_tracker: true,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "sasl-digest-md5")]
            sasl: None,
        }
    }

    /// When leader recipes ([`LeaderLatch`](crate::LeaderLatch),
    /// [`LeaderSelector`](crate::LeaderSelector)) give leadership up because of the connection,
    /// unless a recipe is told otherwise; default [`ErrorPolicy::Standard`].
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.error_policy = policy;
        self
    }

    /// Whether the Client follows the ensemble's membership (default `true`, Curator's
    /// `ensembleTracker`): it reads and watches `/zookeeper/config` (outside the namespace) and
    /// uses the members named there for every later connection — a new session, and a session
    /// moved off members that all went away (see the operations guide). Off, the Client only
    /// ever knows the connect string (and what
    /// [`Client::update_connect_string`] gives it): once every member it names is retired, it
    /// cannot reconnect. Always off over TLS, whose ports the configuration does not name.
    ///
    /// A configuration that names no member with a client address is logged and ignored.
    pub fn ensemble_tracker(mut self, track: bool) -> Self {
        self.ensemble_tracker = track;
        self
    }

    /// [`connect_timeout`](Self::connect_timeout) under Curator's name.
    pub fn connection_timeout(self, d: Duration) -> Self {
        self.connect_timeout(d)
    }

    /// Every path is taken relative to `/<namespace>`, created on first connection (Curator's
    /// namespace). Nested namespaces (`a/b`) are allowed.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Authentication sent on every connection (`scheme`, raw auth bytes; Curator's
    /// `authorization`). May be given several times. A server that refuses it ends the session
    /// (`AuthFailed`).
    pub fn auth(mut self, scheme: &str, auth: &[u8]) -> Self {
        self.auth.push((scheme.to_owned(), auth.to_vec()));
        self
    }

    /// `digest` authentication as `user:password`.
    pub fn digest_auth(self, user: &str, password: &str) -> Self {
        self.auth("digest", format!("{user}:{password}").as_bytes())
    }

    /// ACL for every node this Client and its recipes create when the call names none (lock
    /// nodes, their parents, the namespace): a shorthand for an [`AclProvider`] that answers
    /// `acl` for every path. Replaces an earlier [`acl_provider`](Self::acl_provider).
    pub fn default_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = Arc::new(acl);
        self
    }

    /// Chooses the ACL of each node this Client and its recipes create when the call names none
    /// (Curator's `aclProvider`): lock nodes, the parents created for them and the namespace.
    /// Replaces an earlier [`default_acl`](Self::default_acl). See [`AclProvider`] for the
    /// recommended set-up for locks.
    pub fn acl_provider(mut self, provider: impl AclProvider) -> Self {
        self.acl = Arc::new(provider);
        self
    }

    /// Data for nodes this Client creates when the call gives none.
    pub fn default_data(mut self, data: &[u8]) -> Self {
        self.default_data = Some(data.to_vec());
        self
    }

    /// Connects with TLS, trusting the CA certificates (and CRLs) in `pem` (feature `tls`).
    /// Every host of the connect string then uses TLS unless it is written `tcp://host:port`;
    /// a host written `tcp+tls://host:port` needs this too. The servers' certificates must
    /// name the host connected to (see
    /// [`tls_hostname_verification`](Self::tls_hostname_verification)). The PEM is checked by
    /// [`build`](Self::build), before any I/O.
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(mut self, pem: &str) -> Self {
        self.tls.get_or_insert_with(Default::default).ca_pem = Some(pem.to_owned());
        self
    }

    /// The client certificate (chain) and private key, in PEM, that a TLS connection presents
    /// to servers that ask for one (`ssl.clientAuth=need`); the server then also knows this
    /// session by ZooKeeper's `x509` scheme (feature `tls`). Needs
    /// [`tls_ca_pem`](Self::tls_ca_pem).
    #[cfg(feature = "tls")]
    pub fn tls_identity_pem(mut self, cert: &str, key: &str) -> Self {
        self.tls.get_or_insert_with(Default::default).identity_pem =
            Some((cert.to_owned(), key.to_owned()));
        self
    }

    /// Whether a server's certificate must name the host connected to (default `true`).
    /// Turning it off lets anyone with a certificate from the CA pose as a server (feature
    /// `tls`).
    #[cfg(feature = "tls")]
    pub fn tls_hostname_verification(mut self, verify: bool) -> Self {
        self.tls
            .get_or_insert_with(Default::default)
            .no_hostname_verification = !verify;
        self
    }

    /// Logs in with SASL `DIGEST-MD5` as `user` (feature `sasl-digest-md5`): for servers with
    /// `authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider` and a JAAS
    /// `Server` section listing the user. The session is then known by ZooKeeper's `sasl`
    /// scheme (ACL id `sasl:<user>`). A refused login ends the session: `connect()` fails with
    /// [`Error::AuthFailed`].
    #[cfg(feature = "sasl-digest-md5")]
    pub fn sasl_digest_md5(mut self, user: &str, password: &str) -> Self {
        self.sasl = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Whether sessions will authenticate in some way.
    pub(crate) fn has_credentials(&self) -> bool {
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // set again only with `tls`
        let mut has = !self.auth.is_empty();
        #[cfg(feature = "tls")]
        {
            has |= self.tls.as_ref().is_some_and(|t| t.identity_pem.is_some());
        }
        #[cfg(feature = "sasl-digest-md5")]
        {
            has |= self.sasl.is_some();
        }
        has
    }

    /// Whether TLS options were given.
    pub(crate) fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        return false;
    }

    /// Allow connecting to read-only servers (reported as `ConnectionState::ReadOnly`).
    pub fn can_be_read_only(mut self, yes: bool) -> Self {
        self.can_be_read_only = yes;
        self
    }

    /// Checks the configuration and starts the Client's threads; connecting goes on in the
    /// background. Operations wait for the connection (up to the connection timeout per attempt).
    pub fn build(self) -> Result<Client> {
        let config = self.validate()?;
        Client::start(config)
    }

    /// [`build`](Self::build), then waits up to the connection timeout for the first session.
    ///
    /// # Errors
    /// [`Error::ConnectFailed`] if no session could be made, its `source()` saying why: the
    /// server's refusal ([`Error::NoAuth`] on the namespace, ...) or, when the wire client does
    /// not tell, what a plain socket finds ([`Error::Io`]: a name that does not resolve, a
    /// refused port).
    ///
    /// # Blocking
    /// Up to the connection timeout, plus up to a second per host to find the cause of a failure.
    /// When nothing can answer — every host refuses the TCP connection or does not resolve —
    /// it fails at once (within a few hundred milliseconds) instead of waiting out the timeout,
    /// as the Redis and PostgreSQL Clients do.
    pub fn connect(self) -> Result<Client> {
        let timeout = self.options.connect_timeout();
        let client = self.build()?;
        if let Some(refused) = wait_connected(&client, timeout) {
            client.close();
            return Err(Error::ConnectFailed {
                hosts: client.hosts().to_owned(),
                cause: Box::new(refused),
            });
        }
        if client.is_connected() {
            Ok(client)
        } else {
            let hosts = client.hosts().to_owned();
            let cause = match client.last_open_error() {
                // The server answered and refused us (no right to the namespace, ...).
                Some(e) if !matches!(e, Error::ZooKeeper(_) | Error::ConnectionLoss) => e,
                // The wire client keeps the socket's reason to itself: look for it.
                last => probe(&hosts)
                    .or_else(|| probe_tls(&client.shared().config))
                    .or(last)
                    .unwrap_or(Error::Timeout),
            };
            client.close();
            Err(Error::ConnectFailed {
                hosts,
                cause: Box::new(cause),
            })
        }
    }

    fn validate(mut self) -> Result<Config> {
        let hosts = parse_hosts(&self.connect_string)?;
        let tls = self.check_tls(&hosts)?;
        let timeout = |name: &str, d: Duration| {
            if d.is_zero() {
                Err(Error::invalid(format!("{name} must be greater than zero")))
            } else if d > Duration::from_secs(24 * 3600) {
                Err(Error::invalid(format!(
                    "{name} of {d:?} is unreasonably long"
                )))
            } else {
                Ok(())
            }
        };
        // The server grants at most its own maximum (20 ticks by default): a longer request
        // asks for that maximum.
        let session_timeout =
            (self.options.session_timeout()).min(Duration::from_millis(i32::MAX as u64));
        self.options.session_timeout = Some(session_timeout);
        if session_timeout.is_zero() {
            return Err(Error::invalid("session timeout must be greater than zero"));
        }
        // It bounds how soon a dead connection is noticed (and a hold reads Suspended): "never"
        // cannot work.
        timeout("connection timeout", self.options.connect_timeout())?;
        // "No limit" beyond a day, as without one.
        self.options.operation_timeout = match self.options.operation_timeout {
            Some(d) if d > Duration::from_secs(24 * 3600) => None,
            Some(d) => {
                timeout("operation timeout", d)?;
                Some(d)
            }
            None => None,
        };
        let namespace = match self.namespace.take() {
            None => None,
            Some(ns) => Some(path::validate_namespace(&ns)?),
        };
        if self.acl.default_acl().is_empty() {
            return Err(Error::invalid("default ACL must not be empty"));
        }
        for (scheme, auth) in &self.auth {
            check_auth(scheme, auth)?;
        }
        #[cfg(feature = "sasl-digest-md5")]
        if let Some((user, _)) = &self.sasl {
            if user.is_empty() {
                return Err(Error::invalid("SASL user must not be empty"));
            }
        }
        let default_data = self.default_data.take().unwrap_or_else(local_address);
        if default_data.len() > MAX_DATA_LEN {
            return Err(Error::invalid("default data is over 1 MiB"));
        }
        // Worked out here, on the caller's thread: a user's provider never runs on the I/O
        // thread. The namespace's paths are outside it: the provider gets them as they are.
        let namespace_acls = match &namespace {
            None => Vec::new(),
            Some(ns) => {
                let source = AclSource {
                    provider: self.acl.clone(),
                    namespace: None,
                };
                let mut acls = super::parents::ancestor_acls(ns, |p| source.zk_acl(p));
                acls.push((ns.clone(), source.zk_acl(ns)));
                if let Some((p, _)) = acls.iter().find(|(_, a)| a.is_empty()) {
                    return Err(Error::invalid(format!("the ACL provider gives {p} no ACL")));
                }
                let creator = |(_, a): &&(String, Vec<zookeeper_client::Acl>)| {
                    a.iter().any(|e| e.scheme() == "auth")
                };
                if let Some((p, _)) = acls.iter().find(creator) {
                    if !self.has_credentials() {
                        return Err(Error::invalid(format!(
                            "the ACL for the namespace's {p} grants the creator (`auth`), but \
                             the Client has no credentials (ClientBuilder::digest_auth / auth)"
                        )));
                    }
                }
                acls
            }
        };
        Ok(Config {
            hosts,
            tls,
            namespace_acls,
            namespace,
            default_data,
            has_credentials: self.has_credentials(),
            session_timeout: self.options.session_timeout(),
            connection_timeout: self.options.connect_timeout(),
            operation_timeout: self.options.operation_timeout,
            retry: (self.options.retry).unwrap_or_else(curator_retry),
            auth: self.auth,
            acl: self.acl,
            can_be_read_only: self.can_be_read_only,
            error_policy: self.error_policy,
            ensemble_tracker: self.ensemble_tracker,
            #[cfg(feature = "sasl-digest-md5")]
            sasl: self.sasl,
        })
    }
}

/// Refuses authentication the server would refuse anyway (and end the session for).
pub(crate) fn check_auth(scheme: &str, auth: &[u8]) -> Result<()> {
    if scheme.is_empty() || scheme.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!("bad auth scheme {scheme:?}")));
    }
    if scheme == "digest" && !auth.contains(&b':') {
        return Err(Error::invalid(
            "digest auth must be \"user:password\" (no ':' found)",
        ));
    }
    Ok(())
}

impl ClientBuilder {
    /// The wire client's TLS options, if TLS is used; TLS hosts without TLS options, or
    /// options that do not parse, are refused.
    fn check_tls(&self, hosts: &str) -> Result<Option<TlsConfig>> {
        let tls_hosts: Vec<&str> = hosts
            .split(',')
            .filter(|h| {
                h.starts_with(TLS_PREFIX) || (self.uses_tls() && !h.starts_with(TCP_PREFIX))
            })
            .collect();
        #[cfg(feature = "tls")]
        {
            let Some(settings) = &self.tls else {
                return match tls_hosts.first() {
                    Some(h) => Err(Error::invalid(format!(
                        "{h} uses TLS: give the servers' CA with ClientBuilder::tls_ca_pem"
                    ))),
                    None => Ok(None),
                };
            };
            for host in &tls_hosts {
                super::tls::check_server_name(super::hosts::host_name(host))?;
            }
            Ok(Some(TlsConfig {
                options: settings.to_zk()?,
                settings: settings.clone(),
            }))
        }
        #[cfg(not(feature = "tls"))]
        match tls_hosts.first() {
            Some(h) => Err(Error::invalid(format!(
                "{h} uses TLS, which needs zklock's `tls` feature"
            ))),
            None => Ok(None),
        }
    }
}

/// Curator's default node data: this host's address as text.
fn local_address() -> Vec<u8> {
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            // No packet is sent: connecting a UDP socket only picks the outgoing interface.
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    ip.to_string().into_bytes()
}

/// Waits up to `timeout` for `client`'s first session, in slices; between them, checks whether
/// any host can answer at all. Returns the reason when none can (the wait is then cut short).
fn wait_connected(client: &Client, timeout: Duration) -> Option<Error> {
    const SLICE: Duration = Duration::from_millis(250);
    let deadline = std::time::Instant::now() + timeout;
    let mut probing = true;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if client.block_until_connected(left.min(SLICE)) || left <= SLICE {
            return None;
        }
        if probing {
            // Once an address accepts or is slow to answer, something may be there (a server
            // still starting its session service, a slow route): the whole timeout is waited.
            match refused_by_every_host(client.hosts(), SLICE) {
                Some(refused) if !client.is_connected() => return Some(refused),
                Some(_) => return None,
                None => probing = false,
            }
        }
    }
}

/// The retry policy of a ZooKeeper Client not given one: Curator's for its recipes,
/// exponential backoff from 1 s, 3 retries.
fn curator_retry() -> Arc<dyn RetryPolicy> {
    match ExponentialBackoffRetry::new(Duration::from_secs(1), 3) {
        Ok(policy) => Arc::new(policy),
        Err(_) => unreachable!("1 s and 3 retries are a valid policy"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configuration_is_refused_before_io() {
        let b = || ClientBuilder::new("127.0.0.1:1");
        assert!(b().session_timeout(Duration::ZERO).validate().is_err());
        assert!(b().connection_timeout(Duration::ZERO).validate().is_err());
        assert!(b().operation_timeout(Duration::ZERO).validate().is_err());
        assert!(b().namespace("").validate().is_err());
        assert!(b().namespace("a/../b").validate().is_err());
        assert!(b().default_acl(vec![]).validate().is_err());
        assert!(b().auth("digest", b"nocolon").validate().is_err());
        assert!(b().auth("", b"a:b").validate().is_err());
        assert!(b().digest_auth("a", "b").validate().is_ok());
        let creator = || b().namespace("ns").default_acl(vec![Acl::creator_all()]);
        assert!(creator().validate().is_err());
        assert!(creator().digest_auth("a", "b").validate().is_ok());
        // A TLS host needs TLS options (and the feature).
        assert!(ClientBuilder::new("tcp+tls://127.0.0.1:1")
            .validate()
            .is_err());
        assert!(b()
            .default_data(&vec![0; MAX_DATA_LEN + 1])
            .validate()
            .is_err());
        let c = b().namespace("app/x").validate().unwrap();
        assert_eq!(c.namespace.as_deref(), Some("/app/x"));
        assert!(!c.default_data.is_empty());
    }
}
