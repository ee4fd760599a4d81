//! TLS to PostgreSQL (feature `tls`): the `sslmode` of a connection string, and
//! tokio-postgres's TLS connector on rustls (futures-rustls, bridged to tokio's I/O traits).
//!
//! `sslmode` is read by zklock, not tokio-postgres (which knows only `disable`, `prefer` and
//! `require`): `disable` and `prefer` connect in the clear (zklock never encrypts unless asked,
//! and never falls back once asked); `require` and `verify-full` encrypt and check the server's
//! certificate chain and that it names the host; `verify-ca` checks the chain only.

use crate::core::error::{Error, Result};

/// What a URL's `sslmode` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No TLS (`disable`, `prefer`, or no `sslmode`).
    Clear,
    /// TLS, the chain checked (`verify-ca`).
    VerifyCa,
    /// TLS, the chain and the host name checked (`require`, `verify-full`).
    VerifyFull,
}

/// What an `sslmode` value asks for.
pub(crate) fn mode(sslmode: &str) -> Result<Mode> {
    match sslmode {
        "disable" | "allow" | "prefer" => Ok(Mode::Clear),
        "require" | "verify-full" => Ok(Mode::VerifyFull),
        "verify-ca" => Ok(Mode::VerifyCa),
        other => Err(Error::invalid(format!(
            "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, \
             verify-full"
        ))),
    }
}

#[cfg(not(feature = "tls"))]
mod connector {
    use super::Mode;
    use crate::core::error::{Error, Result};

    use tokio_postgres::tls::{MakeTlsConnect, NoTlsError, NoTlsStream};
    use tokio_postgres::NoTls;

    /// No TLS in this build: tokio-postgres's `NoTls`, as a type that is cloned as the TLS one
    /// is.
    #[derive(Clone, Debug)]
    pub(crate) struct Tls(NoTls);

    impl<S> MakeTlsConnect<S> for Tls {
        type Stream = NoTlsStream;
        type TlsConnect = NoTls;
        type Error = NoTlsError;

        fn make_tls_connect(&mut self, domain: &str) -> Result<NoTls, NoTlsError> {
            <NoTls as MakeTlsConnect<S>>::make_tls_connect(&mut self.0, domain)
        }
    }

    /// The connector for `mode`: a URL that asks for TLS is refused in a build without it.
    pub(crate) fn connector(mode: Mode, _: &super::Options) -> Result<Tls> {
        match mode {
            Mode::Clear => Ok(Tls(NoTls)),
            _ => Err(Error::invalid(
                "the connection string (or PGSSLMODE) asks for TLS (sslmode=require, verify-ca \
                 or verify-full): TLS connections to PostgreSQL need zklock's `tls` feature",
            )),
        }
    }

    /// Why a handshake failed: never, without TLS.
    pub(crate) fn refusal(_: &(dyn std::error::Error + 'static)) -> Option<String> {
        None
    }
}

/// The CA and client identity given to the builder (PEM).
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    pub(crate) ca: Option<String>,
    pub(crate) identity: Option<(String, String)>,
}

/// `options` completed from the files the connection string names (`sslrootcert`, `sslcert`
/// and `sslkey`, or `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`); what the builder was given
/// goes first. A file that cannot be read, or a certificate without its key, is refused.
pub(crate) fn with_files(options: &Options, files: &super::libpq::SslFiles) -> Result<Options> {
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map_err(|e| Error::invalid(format!("{key}={}: cannot read it: {e}", path.display())))
    };
    let mut options = options.clone();
    if options.ca.is_none() {
        if let Some(path) = &files.root_cert {
            // libpq's `sslrootcert=system`: the system's CAs, which zklock trusts anyway.
            if path.as_os_str() != "system" {
                options.ca = Some(read("sslrootcert", path)?);
            }
        }
    }
    if options.identity.is_none() {
        match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                options.identity = Some((read("sslcert", cert)?, read("sslkey", key)?));
            }
            (None, None) => {}
            _ => {
                return Err(Error::invalid(
                    "sslcert and sslkey go together: the client's certificate and its key",
                ))
            }
        }
    }
    Ok(options)
}

#[cfg(feature = "tls")]
mod connector {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
    use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};

    use super::{Mode, Options};
    use crate::core::error::{Error, Result};

    /// tokio-postgres's TLS connector: rustls with the configuration made from the options, or
    /// none (the session's `sslmode` is then `disable`, and it is never asked to connect).
    #[derive(Clone)]
    pub(crate) struct Tls(Option<Arc<rustls::ClientConfig>>);

    /// The connector for `mode` and `options`; the PEM is checked here, before any I/O.
    pub(crate) fn connector(mode: Mode, options: &Options) -> Result<Tls> {
        if mode == Mode::Clear {
            if options.ca.is_some() || options.identity.is_some() {
                return Err(Error::invalid(
                    "a TLS CA or client certificate was given but the connection string (and \
                     PGSSLMODE) does not ask for TLS: add sslmode=verify-full (or require, \
                     verify-ca)",
                ));
            }
            return Ok(Tls(None));
        }
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let mut roots = RootCertStore::empty();
        match &options.ca {
            Some(pem) => {
                for cert in certificates(pem, "the TLS CA")? {
                    roots
                        .add(cert)
                        .map_err(|e| Error::invalid(format!("the TLS CA: {e}")))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        let roots = Arc::new(roots);
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::invalid(format!("TLS: {e}")))?;
        let builder = if mode == Mode::VerifyCa {
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| Error::invalid(format!("the TLS CA: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
        } else {
            builder.with_root_certificates(roots)
        };
        let config = match &options.identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let certs = certificates(cert, "the TLS client certificate")?;
                let key = private_key(key)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| Error::invalid(format!("the TLS client certificate: {e}")))?
            }
        };
        Ok(Tls(Some(Arc::new(config))))
    }

    fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
        let certs = rustls_pemfile::certs(&mut pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::invalid(format!("{what} is not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(Error::invalid(format!("{what} holds no certificate")));
        }
        Ok(certs)
    }

    fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>> {
        rustls_pemfile::private_key(&mut pem.as_bytes())
            .map_err(|e| Error::invalid(format!("the TLS client key is not PEM: {e}")))?
            .ok_or_else(|| Error::invalid("the TLS client key holds no private key"))
    }

    /// Why a handshake failed, when `e` (or a cause of it) is rustls's refusal.
    pub(crate) fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let mut source = Some(e);
        while let Some(cause) = source {
            let tls = cause.downcast_ref::<rustls::Error>().or_else(|| {
                cause
                    .downcast_ref::<io::Error>()
                    .and_then(io::Error::get_ref)
                    .and_then(|i| i.downcast_ref::<rustls::Error>())
            });
            if let Some(tls) = tls {
                return Some(format!("the TLS handshake failed: {tls}"));
            }
            source = cause.source();
        }
        None
    }

    /// `verify-ca`: the chain is checked, the name it is for is not.
    #[derive(Debug)]
    struct ChainOnly(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }

    impl<S> MakeTlsConnect<S> for Tls
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = Stream<S>;
        type TlsConnect = Connect;
        type Error = io::Error;

        /// Asked for every session, TLS or not (a clear session never uses the connector).
        fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
            Ok(Connect {
                config: self.0.clone(),
                domain: domain.to_owned(),
            })
        }
    }

    /// One handshake to one server.
    pub(crate) struct Connect {
        config: Option<Arc<rustls::ClientConfig>>,
        domain: String,
    }

    impl<S> TlsConnect<S> for Connect
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = Stream<S>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            Box::pin(async move {
                let config = self
                    .config
                    .ok_or_else(|| io::Error::other("TLS is not configured for this session"))?;
                let name = ServerName::try_from(self.domain)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let tls = futures_rustls::TlsConnector::from(config)
                    .connect(name, stream.compat())
                    .await?;
                Ok(Stream(tls.compat()))
            })
        }
    }

    /// An encrypted session's stream.
    pub(crate) struct Stream<S>(Compat<futures_rustls::client::TlsStream<Compat<S>>>);

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Stream<S> {
        /// No channel binding (SCRAM's `tls-server-end-point` is optional: `channel_binding`
        /// defaults to `prefer`).
        fn channel_binding(&self) -> ChannelBinding {
            ChannelBinding::none()
        }
    }
}

pub(crate) use connector::{connector, refusal, Tls};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_values_are_read_by_zklock() {
        assert_eq!(mode("verify-full").unwrap(), Mode::VerifyFull);
        assert_eq!(mode("require").unwrap(), Mode::VerifyFull);
        assert_eq!(mode("verify-ca").unwrap(), Mode::VerifyCa);
        for clear in ["disable", "allow", "prefer"] {
            assert_eq!(mode(clear).unwrap(), Mode::Clear);
        }
        assert!(mode("maybe")
            .unwrap_err()
            .to_string()
            .contains("sslmode=maybe"));
    }
}
