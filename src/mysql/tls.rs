//! TLS to MySQL and MariaDB (feature `tls`): the `mysql` client's `ssl-mode`, `ssl-ca`,
//! `ssl-cert` and `ssl-key` in the URL, on the `mysql` crate's rustls support.
//!
//! As for PostgreSQL, zklock never tries TLS unasked and never falls back once asked:
//! `DISABLED` and `PREFERRED` (and no `ssl-mode`) connect in the clear; `REQUIRED` and
//! `VERIFY_IDENTITY` encrypt and check the server's certificate chain and that it names the
//! host (zklock is stricter than the `mysql` client, whose `REQUIRED` checks nothing);
//! `VERIFY_CA` checks the chain only.

use std::path::PathBuf;

use crate::core::error::{Error, Result};

/// What a URL's `ssl-mode` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// No TLS (`DISABLED`, `PREFERRED`, or no `ssl-mode`).
    #[default]
    Clear,
    /// TLS, the chain checked (`VERIFY_CA`).
    VerifyCa,
    /// TLS, the chain and the host checked (`REQUIRED`, `VERIFY_IDENTITY`).
    VerifyIdentity,
}

/// The accepted `ssl-mode` values, for messages.
const MODES: &str = "DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY";

/// A URL's TLS parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) mode: Mode,
    /// `ssl-ca`: the CA file (PEM or DER).
    pub(crate) ca: Option<PathBuf>,
    /// `ssl-cert` and `ssl-key`: the client's certificate and its key.
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
}

/// The `mysql` crate's own TLS parameters, which zklock does not pass on: the `ssl-*` ones say
/// the same in the `mysql` client's words.
const CRATE_TLS_PARAMS: [&str; 8] = [
    "root_cert_path",
    "cert_chain_path",
    "priv_key_path",
    "danger_skip_domain_validation",
    "danger_accept_invalid_certs",
    "cipher_suites",
    "pkcs12_path",
    "pkcs12_pass",
];

/// `url` without its TLS parameters (which the `mysql` crate does not know), and what they
/// ask for. Parameter names are read without case, `-` or `_` (`ssl-mode`, `ssl_mode`,
/// `sslMode`), `ssl-mode` values without case and with `-` or `_` (`verify_identity`,
/// `VERIFY-IDENTITY`). The files are read here when the mode asks for TLS, so that one that
/// cannot be read is refused before any I/O; TLS asked for in a build without the `tls`
/// feature is refused too.
pub(crate) fn split(url: &str) -> Result<(String, Tls)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Tls::default()));
    };
    let mut mode = None;
    let (mut ca, mut cert, mut key) = (None, None, None);
    let mut kept = Vec::new();
    for param in query.split('&') {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let plain: String = name
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        match plain.as_str() {
            "sslmode" => mode = Some(parse_mode(&decode(value))?),
            "sslca" => ca = Some(PathBuf::from(decode(value))),
            "sslcert" => cert = Some(PathBuf::from(decode(value))),
            "sslkey" => key = Some(PathBuf::from(decode(value))),
            _ if CRATE_TLS_PARAMS.contains(&name) => {
                return Err(Error::invalid(format!(
                "{name}: zklock takes TLS in the mysql client's words: ssl-mode=VERIFY_IDENTITY \
                     (or VERIFY_CA, REQUIRED), ssl-ca=PATH, ssl-cert=PATH and ssl-key=PATH"
            )))
            }
            _ => kept.push(param),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    let Some(mode) = mode else {
        if ca.is_some() || cert.is_some() || key.is_some() {
            return Err(Error::invalid(
                "ssl-ca, ssl-cert or ssl-key was given without an ssl-mode that asks for TLS: \
                 add ssl-mode=VERIFY_IDENTITY (or VERIFY_CA, REQUIRED)",
            ));
        }
        return Ok((url, Tls::default()));
    };
    if mode == Mode::Clear {
        // As the `mysql` client: the files are not read when TLS is not asked for.
        return Ok((url, Tls::default()));
    }
    if !cfg!(feature = "tls") {
        return Err(Error::invalid(
            "the URL asks for TLS (ssl-mode=REQUIRED, VERIFY_CA or VERIFY_IDENTITY): TLS \
             connections to MySQL need zklock's `tls` feature",
        ));
    }
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(Error::invalid(
                "ssl-cert and ssl-key go together: the client's certificate and its key",
            ))
        }
    };
    let tls = Tls { mode, ca, identity };
    check_files(&tls)?;
    Ok((url, tls))
}

/// What an `ssl-mode` value asks for.
fn parse_mode(value: &str) -> Result<Mode> {
    match value.to_ascii_uppercase().replace('-', "_").as_str() {
        "DISABLED" | "PREFERRED" => Ok(Mode::Clear),
        "REQUIRED" | "VERIFY_IDENTITY" => Ok(Mode::VerifyIdentity),
        "VERIFY_CA" => Ok(Mode::VerifyCa),
        _ => Err(Error::invalid(format!(
            "ssl-mode={value} is not one of {MODES}"
        ))),
    }
}

/// A URL query value with its `%XX` escapes (and `+`) decoded.
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the files `tls` names: each must be readable, the CA and the certificate must hold a
/// certificate, the key a private key.
#[cfg(feature = "tls")]
fn check_files(tls: &Tls) -> Result<()> {
    let read = |option: &str, path: &std::path::Path| {
        let bytes = std::fs::read(path).map_err(|e| {
            Error::invalid(format!("{option}={}: cannot read it: {e}", path.display()))
        })?;
        if bytes.is_empty() {
            return Err(Error::invalid(format!(
                "{option}={}: the file is empty",
                path.display()
            )));
        }
        Ok(bytes)
    };
    // PEM is checked for what it must hold; anything else is taken as DER, as the crate does.
    let pem = |bytes: &[u8]| bytes.windows(11).any(|w| w == b"-----BEGIN ");
    let certificates = |option: &str, path: &std::path::Path| -> Result<()> {
        let bytes = read(option, path)?;
        if pem(&bytes) {
            let found = rustls_pemfile::certs(&mut &bytes[..])
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| {
                    Error::invalid(format!("{option}={}: not PEM: {e}", path.display()))
                })?;
            if found.is_empty() {
                return Err(Error::invalid(format!(
                    "{option}={}: holds no certificate",
                    path.display()
                )));
            }
        }
        Ok(())
    };
    if let Some(ca) = &tls.ca {
        certificates("ssl-ca", ca)?;
    }
    if let Some((cert, key)) = &tls.identity {
        certificates("ssl-cert", cert)?;
        let bytes = read("ssl-key", key)?;
        if pem(&bytes) {
            match rustls_pemfile::private_key(&mut &bytes[..]) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(Error::invalid(format!(
                        "ssl-key={}: holds no private key",
                        key.display()
                    )))
                }
                Err(e) => {
                    return Err(Error::invalid(format!(
                        "ssl-key={}: not PEM: {e}",
                        key.display()
                    )))
                }
            }
        }
    }
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn check_files(_: &Tls) -> Result<()> {
    Ok(())
}

/// The `mysql` crate's TLS options for `tls`: none in the clear.
#[cfg(feature = "tls")]
pub(crate) fn ssl_opts(tls: &Tls) -> Option<mysql::SslOpts> {
    if tls.mode == Mode::Clear {
        return None;
    }
    Some(
        mysql::SslOpts::default()
            .with_root_cert_path(tls.ca.clone())
            .with_client_identity(
                tls.identity
                    .clone()
                    .map(|(cert, key)| mysql::ClientIdentity::new(cert, key)),
            )
            .with_danger_skip_domain_validation(tls.mode == Mode::VerifyCa),
    )
}

/// No TLS in this build: `split` refused every mode that asks for it.
#[cfg(not(feature = "tls"))]
pub(crate) fn ssl_opts(_: &Tls) -> Option<mysql::SslOpts> {
    None
}

/// Why a connection failed, when `e` is (or was caused by) a refused TLS handshake, or a
/// server that offers no TLS.
pub(crate) fn refusal(e: &mysql::Error) -> Option<String> {
    if let mysql::Error::DriverError(mysql::DriverError::TlsNotSupported) = e {
        return Some(
            "the server does not offer TLS (its have_ssl is not YES), and the URL's ssl-mode \
             asks for it"
                .into(),
        );
    }
    handshake(e)
}

#[cfg(feature = "tls")]
fn handshake(e: &mysql::Error) -> Option<String> {
    use std::error::Error as _;
    // The `mysql` crate's errors do not chain by `source()`: each kind is opened here. A
    // refused handshake comes as an I/O error (rustls's, from the first read or write), in
    // the codec's error on the first packet, or as the crate's `TlsError` at set-up.
    let cause: Option<&(dyn std::error::Error + 'static)> = match e {
        mysql::Error::IoError(io) => Some(io),
        mysql::Error::CodecError(codec) => codec.source(),
        mysql::Error::TlsError(tls) => tls.source(),
        _ => None,
    };
    let tls = cause.and_then(|c| {
        c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|i| i.downcast_ref::<rustls::Error>())
        })
    })?;
    Some(describe(tls))
}

#[cfg(not(feature = "tls"))]
fn handshake(_: &mysql::Error) -> Option<String> {
    None
}

/// rustls's refusal, said for a reader who configures the CA.
#[cfg(feature = "tls")]
fn describe(e: &rustls::Error) -> String {
    use rustls::{CertificateError, Error as E};
    match e {
        E::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
            format!(
            "the TLS handshake failed: the server's certificate is not trusted (signed neither \
             by the ssl-ca file nor by a CA of the Mozilla roots) ({e})"
        )
        }
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the TLS handshake failed: the server's certificate does not name the URL's host \
             (ssl-mode=VERIFY_CA checks the chain only) ({e})"
        ),
        _ => format!("the TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_mode_values_and_names_are_read_without_case() {
        for (url, mode) in [
            ("mysql://h/db?ssl-mode=DISABLED", Mode::Clear),
            ("mysql://h/db?ssl_mode=preferred", Mode::Clear),
            (
                "mysql://h/db?sslMode=disabled&ssl-ca=/nonexistent",
                Mode::Clear,
            ),
        ] {
            let (rest, tls) = split(url).unwrap();
            assert_eq!((rest.as_str(), tls.mode), ("mysql://h/db", mode), "{url}");
        }
        let (rest, tls) = split("mysql://h/db?prefer_socket=false&SSL-MODE=Disabled").unwrap();
        assert_eq!(
            (rest.as_str(), tls),
            ("mysql://h/db?prefer_socket=false", Tls::default())
        );
        assert_eq!(parse_mode("verify-identity").unwrap(), Mode::VerifyIdentity);
        assert_eq!(parse_mode("Required").unwrap(), Mode::VerifyIdentity);
        assert_eq!(parse_mode("verify_ca").unwrap(), Mode::VerifyCa);
    }

    #[test]
    fn unknown_modes_and_stray_files_are_refused() {
        let why = split("mysql://h/db?ssl-mode=strict")
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("ssl-mode=strict") && why.contains(MODES),
            "{why}"
        );
        let why = split("mysql://h/db?ssl-ca=/etc/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(why.contains("without an ssl-mode"), "{why}");
        let why = split("mysql://h/db?root_cert_path=/etc/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("root_cert_path") && why.contains("ssl-ca"),
            "{why}"
        );
    }

    /// In a build without `tls`, a mode that asks for TLS is refused before the files are read.
    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_modes_need_the_tls_feature() {
        for mode in ["REQUIRED", "VERIFY_CA", "verify_identity"] {
            let why = split(&format!("mysql://h/db?ssl-mode={mode}"))
                .unwrap_err()
                .to_string();
            assert!(why.contains("`tls` feature"), "{why}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_modes_read_their_files_first() {
        let dir = std::env::temp_dir().join(format!(
            "zklock-mysql-tls-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir(&dir).unwrap();
        let missing = dir.join("missing-ca.pem");
        let why = split(&format!(
            "mysql://h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
            missing.display()
        ))
        .unwrap_err()
        .to_string();
        assert!(
            why.contains("ssl-ca=") && why.contains("missing-ca.pem"),
            "{why}"
        );
        let not_a_cert = dir.join("key.pem");
        std::fs::write(
            &not_a_cert,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let why = split(&format!(
            "mysql://h/db?ssl-mode=verify_ca&ssl-ca={}",
            not_a_cert.display()
        ))
        .unwrap_err()
        .to_string();
        assert!(why.contains("no certificate"), "{why}");
        let why = split(&format!(
            "mysql://h/db?ssl-mode=required&ssl-cert={}",
            not_a_cert.display()
        ))
        .unwrap_err()
        .to_string();
        assert!(why.contains("ssl-key"), "{why}");
        let (_, tls) = split("mysql://h/db?ssl-mode=required").unwrap();
        assert_eq!(tls.mode, Mode::VerifyIdentity);
        assert!(ssl_opts(&tls).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
        // `%2F` in a path is a `/`.
        assert_eq!(decode("%2Ftmp%2Fca.pem"), "/tmp/ca.pem");
    }
}
