//! TLS for a [`TestingServer`](super::TestingServer), a `TestingRedis`, a `TestingPostgres` and a
//! `TestingMariaDb`: a throwaway CA,
//! server and client certificates made with the `openssl` command in the server's temporary
//! directory, and the `zoo.cfg` lines that open a Netty `secureClientPort` with them.

use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The certificates of a TLS [`TestingServer`](super::TestingServer) or `TestingRedis`, in
/// PEM, for the client's TLS options (`tls_ca_pem`, `tls_identity_pem`, feature `tls`).
///
/// The server's certificate names `localhost` and `127.0.0.1`.
#[derive(Clone)]
pub struct TestingTls {
    ca: String,
    untrusted_ca: String,
    client_cert: String,
    client_key: String,
    client_auth: bool,
}

impl std::fmt::Debug for TestingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingTls")
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

impl TestingTls {
    /// The CA that signed the server's and the client's certificates.
    pub fn ca_pem(&self) -> &str {
        &self.ca
    }

    /// Another CA, which signed nothing the server presents: a client that trusts only it
    /// must be refused.
    pub fn untrusted_ca_pem(&self) -> &str {
        &self.untrusted_ca
    }

    /// A client certificate the server accepts (CN `zklock-client`).
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert
    }

    /// The private key of [`client_cert_pem`](Self::client_cert_pem) (PKCS#8).
    pub fn client_key_pem(&self) -> &str {
        &self.client_key
    }

    /// Whether the server requires a client certificate (`ssl.clientAuth=need`).
    pub fn requires_client_certificate(&self) -> bool {
        self.client_auth
    }
}

/// Runs `openssl <args>` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "a TLS TestingServer makes its certificates with the `openssl` command, \
                     which does not run: {e} (apt-get install openssl)"
                ),
            )
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A self-signed CA `name.pem` with key `name.key`.
fn ca(dir: &Path, name: &str) -> io::Result<()> {
    let subject = format!("/CN=zklock-testing-{name}");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-days",
            "7",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-subj",
            &subject,
        ],
    )
}

/// `name.pem` (signed by `ca`) with key `name.key`, naming `names` (DNS names, or IP
/// addresses) as its subject alternative names.
fn leaf(dir: &Path, name: &str, cn: &str, usage: &str, names: &[&str]) -> io::Result<()> {
    let san: Vec<String> = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(_) => format!("IP:{n}"),
            Err(_) => format!("DNS:{n}"),
        })
        .collect();
    fs::write(
        dir.join(format!("{name}.ext")),
        format!(
            "basicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage={usage}\n\
             subjectAltName={}\n",
            san.join(",")
        ),
    )?;
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-sha256",
            "-days",
            "7",
            "-out",
            &pem,
            "-extfile",
            &ext,
        ],
    )
}

/// The names a testing server's certificate gives unless asked otherwise.
pub(super) const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// Makes a CA, an untrusted CA, a server and a client certificate in `dir/tls` (PEM, keys in
/// `NAME.key`); returns them and that directory. The server's certificate names `localhost`
/// and `127.0.0.1`.
pub(super) fn certificates(dir: &Path, client_auth: bool) -> io::Result<(TestingTls, PathBuf)> {
    certificates_naming(dir, client_auth, &SERVER_NAMES)
}

/// As [`certificates`], the server's certificate naming `names` (DNS names, or IP addresses)
/// and nothing else.
pub(super) fn certificates_naming(
    dir: &Path,
    client_auth: bool,
    names: &[&str],
) -> io::Result<(TestingTls, PathBuf)> {
    let tls = dir.join("tls");
    fs::create_dir_all(&tls)?;
    ca(&tls, "ca")?;
    ca(&tls, "untrusted-ca")?;
    leaf(
        &tls,
        "server",
        names.first().unwrap_or(&"localhost"),
        "serverAuth",
        names,
    )?;
    leaf(&tls, "client", "zklock-client", "clientAuth", &SERVER_NAMES)?;
    let read = |name: &str| fs::read_to_string(tls.join(name));
    let certificates = TestingTls {
        ca: read("ca.pem")?,
        untrusted_ca: read("untrusted-ca.pem")?,
        client_cert: read("client.pem")?,
        client_key: read("client.key")?,
        client_auth,
    };
    Ok((certificates, tls))
}

/// Makes the certificates in `dir/tls` and appends the TLS server configuration to
/// `dir/zoo.cfg`: Netty, `secureClientPort` on loopback, PEM key and trust stores.
pub(super) fn configure(dir: &Path, secure_port: u16, client_auth: bool) -> io::Result<TestingTls> {
    let (certificates, tls) = certificates(dir, client_auth)?;
    let read = |name: &str| fs::read_to_string(tls.join(name));
    // ZooKeeper's PEM key store: the private key, then the certificate.
    fs::write(
        tls.join("server-keystore.pem"),
        format!("{}{}", read("server.key")?, read("server.pem")?),
    )?;
    let path = |name: &str| -> io::Result<String> {
        let p: PathBuf = tls.join(name);
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "temp dir is not UTF-8"))
    };
    let mut cfg = String::new();
    let _ = write!(
        cfg,
        "# TLS, written by zklock::testing\n\
         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
         secureClientPort={secure_port}\n\
         secureClientPortAddress=127.0.0.1\n\
         authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n\
         ssl.keyStore.location={keystore}\n\
         ssl.keyStore.type=PEM\n\
         ssl.trustStore.location={truststore}\n\
         ssl.trustStore.type=PEM\n\
         ssl.clientAuth={auth}\n\
         ssl.hostnameVerification=false\n",
        keystore = path("server-keystore.pem")?,
        truststore = path("ca.pem")?,
        auth = if client_auth { "need" } else { "none" },
    );
    OpenOptions::new()
        .append(true)
        .open(dir.join("zoo.cfg"))?
        .write_all(cfg.as_bytes())?;
    Ok(certificates)
}
