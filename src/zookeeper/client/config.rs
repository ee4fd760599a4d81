//! A Client's checked configuration: plain values, read by the session supervisor and the
//! calls; the builder makes it and nothing here knows the builder.

use std::sync::Arc;
use std::time::Duration;

use super::acl::SharedAcl;
use super::types::ErrorPolicy;
use crate::core::retry::RetryPolicy;

/// The TLS part of a checked configuration.
#[cfg(feature = "tls")]
#[derive(Clone)]
pub(crate) struct TlsConfig {
    pub(crate) options: zookeeper_client::TlsOptions,
    pub(crate) settings: super::tls::TlsSettings,
}

/// Never made without the `tls` feature.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(crate) enum TlsConfig {}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

/// A checked configuration.
pub(crate) struct Config {
    /// `[tcp://|tcp+tls://]host:port,...`, as the wire client takes it.
    pub(crate) hosts: String,
    /// Set when some host uses TLS.
    pub(crate) tls: Option<TlsConfig>,
    /// The ACL of the namespace and of each of its ancestors.
    pub(crate) namespace_acls: Vec<(String, Vec<zookeeper_client::Acl>)>,
    pub(crate) namespace: Option<String>,
    pub(crate) default_data: Vec<u8>,
    /// Whether the Client authenticates (auth, a TLS identity, SASL).
    pub(crate) has_credentials: bool,
    pub(crate) session_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) operation_timeout: Option<Duration>,
    pub(crate) retry: Arc<dyn RetryPolicy>,
    pub(crate) auth: Vec<(String, Vec<u8>)>,
    pub(crate) acl: SharedAcl,
    pub(crate) can_be_read_only: bool,
    pub(crate) error_policy: ErrorPolicy,
    pub(crate) ensemble_tracker: bool,
    #[cfg(feature = "sasl-digest-md5")]
    pub(crate) sasl: Option<(String, String)>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("hosts", &self.hosts)
            .field("namespace", &self.namespace)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}
