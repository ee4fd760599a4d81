//! TLS settings (feature `tls`), and a handshake probe that tells why a TLS connection is
//! refused: the wire client only retries until the connection timeout, keeping the reason to
//! itself.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use zookeeper_client as zk;

use crate::core::error::{Error, Result};

/// What [`ClientBuilder`](crate::ClientBuilder)'s TLS options collected.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) ca_pem: Option<String>,
    pub(crate) identity_pem: Option<(String, String)>,
    pub(crate) no_hostname_verification: bool,
}

impl TlsSettings {
    /// The wire client's options; bad PEM is refused here, before any I/O.
    pub(crate) fn to_zk(&self) -> Result<zk::TlsOptions> {
        let Some(ca) = &self.ca_pem else {
            return Err(Error::invalid(
                "TLS needs the CA that signed the servers' certificates: \
                 ClientBuilder::tls_ca_pem",
            ));
        };
        let bad = |what: &str, e: zk::Error| Error::invalid(format!("TLS {what}: {e}"));
        let mut options = zk::TlsOptions::new()
            .with_pem_ca(ca)
            .map_err(|e| bad("CA bundle", e))?;
        if let Some((cert, key)) = &self.identity_pem {
            options = options
                .with_pem_identity(cert, key)
                .map_err(|e| bad("client certificate or key", e))?;
            // The wire client reads the key lazily: make sure there is a certificate too.
            if rustls_pemfile::certs(&mut cert.as_bytes()).next().is_none() {
                return Err(Error::invalid(
                    "TLS client certificate: no certificate in PEM",
                ));
            }
        }
        if self.no_hostname_verification {
            // SAFETY (not memory safety): the caller asked for it, knowing it allows a
            // man-in-the-middle with any certificate the CA signed.
            #[allow(unsafe_code)]
            unsafe {
                options = options.with_no_hostname_verification();
            }
        }
        Ok(options)
    }

    fn rustls_config(&self) -> Option<rustls::ClientConfig> {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut self.ca_pem.as_deref()?.as_bytes()) {
            let _ = roots.add(cert.ok()?);
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots);
        match &self.identity_pem {
            None => Some(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let certs = rustls_pemfile::certs(&mut cert.as_bytes())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .ok()?;
                let key = rustls_pemfile::private_key(&mut key.as_bytes()).ok()??;
                builder.with_client_auth_cert(certs, key).ok()
            }
        }
    }

    /// Why a TLS session with `host:port` cannot be had, if a handshake (and a moment after
    /// it, when a TLS 1.3 server judges our certificate) says so; `None` if it goes through
    /// or the socket does not tell.
    pub(crate) fn probe(&self, host: &str, port: u16) -> Option<Error> {
        let config = self.rustls_config()?;
        let name = ServerName::try_from(host.to_owned()).ok()?;
        let addr = (host, port).to_socket_addrs().ok()?.next()?;
        let mut tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        tcp.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        tcp.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
        let refused = |e: std::io::Error| -> Option<Error> {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                return None;
            }
            let reason = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                )) if self.no_hostname_verification => {
                    return None;
                }
                Some(tls) => describe(tls),
                None => e.to_string(),
            };
            Some(Error::Tls(format!("{host}:{port}: {reason}")))
        };
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut tcp) {
                return refused(e);
            }
        }
        let mut byte = [0u8; 1];
        match rustls::Stream::new(&mut conn, &mut tcp).read(&mut byte) {
            Err(e) => refused(e),
            Ok(0) => Some(Error::Tls(format!(
                "{host}:{port}: the server closed the connection right after the TLS handshake"
            ))),
            Ok(_) => None,
        }
    }
}

/// Whether the server at `host:port` answers a TLS handshake with a certificate (a client
/// without TLS options was pointed at a TLS port).
pub(crate) fn speaks_tls(host: &str, port: u16) -> bool {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let Ok(builder) =
        rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()
    else {
        return false;
    };
    let config = builder
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return false;
    };
    let Some(addr) = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    else {
        return false;
    };
    let Ok(mut tcp) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let timeouts = [
        tcp.set_read_timeout(Some(Duration::from_secs(1))),
        tcp.set_write_timeout(Some(Duration::from_secs(1))),
    ];
    let Ok(mut conn) = rustls::ClientConnection::new(Arc::new(config), name) else {
        return false;
    };
    if timeouts.iter().any(|t| t.is_err()) {
        return false;
    }
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            // It sent a certificate, which we could not check without a CA: it speaks TLS.
            return matches!(
                e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()),
                Some(rustls::Error::InvalidCertificate(_))
            );
        }
    }
    true
}

/// A rustls error in words a user can act on.
fn describe(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C};
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => format!(
            "the server's certificate is not signed by a CA this client trusts ({e}): check \
             ClientBuilder::tls_ca_pem"
        ),
        rustls::Error::InvalidCertificate(C::NotValidForName) => {
            format!("the server's certificate does not name the host connected to ({e})")
        }
        rustls::Error::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::HandshakeFailure | A::UnknownCA,
        ) => format!(
            "the server refused this client's certificate or its lack of one ({e}): check \
             ClientBuilder::tls_identity_pem"
        ),
        other => format!("TLS handshake failed: {other}"),
    }
}

/// Whether `host` can be a TLS server name (a DNS name or an IP address).
pub(crate) fn check_server_name(host: &str) -> Result<()> {
    ServerName::try_from(host.to_owned())
        .map(drop)
        .map_err(|_| Error::invalid(format!("{host:?} cannot be a TLS server name")))
}
