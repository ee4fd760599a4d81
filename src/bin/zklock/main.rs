//! `zklock`: Apache Curator's lock recipes from the shell. See `zklock --help` and
//! `docs/cli.md`.
#![deny(unsafe_code)]

mod args;
mod backend_file;
#[cfg(feature = "mysql")]
mod backend_mysql;
#[cfg(feature = "postgres")]
mod backend_postgres;
#[cfg(feature = "redis")]
mod backend_redis;
mod child;
mod contender;
mod elect;
mod elect_latch;
mod holders;
mod listing;
mod revoke;
mod run;

use std::fmt;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use zklock::Client;

use crate::args::{Cli, Command, Global, HoldersArgs};
use crate::contender::Site;

/// Exit codes of `run` and `elect` besides the command's own status (documented in `--help`
/// and `docs/cli.md`).
pub mod code {
    /// The lock (or leadership) was lost while the command ran; the command was terminated.
    pub const LOST: u8 = 123;
    /// `--timeout` expired before the lock was acquired; the command never ran.
    pub const TIMEOUT: u8 = 124;
    /// zklock itself failed (connection, bad path, ZooKeeper error).
    pub const ZKLOCK_FAILED: u8 = 125;
    /// The command was found but could not be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// Other commands: a failure.
    pub const FAILED: u8 = 1;
    /// Bad usage: an unknown option or scheme, an option the backend does not have.
    pub const USAGE: u8 = 2;
}

/// A failure: one line for stderr (with the cause chain) and the exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: code::FAILED,
        }
    }

    /// `context: error: cause: cause...`, each cause once (`error: cause...` without a
    /// context).
    pub fn from_error(context: &str, error: &(dyn std::error::Error + 'static)) -> Failure {
        let mut message = if context.is_empty() {
            error.to_string()
        } else {
            format!("{context}: {error}")
        };
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.ends_with(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        Failure::new(message)
    }

    /// Bad usage (exit 2), as clap's own refusals.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(message).with_code(code::USAGE)
    }

    /// The code, unless it is bad usage already.
    pub fn with_code(mut self, code: u8) -> Failure {
        if self.code != code::USAGE {
            self.code = code;
        }
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type CliResult<T> = Result<T, Failure>;

/// Adds context to a library error.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> CliResult<T>;
}

impl<T, E: std::error::Error + 'static> Context<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> CliResult<T> {
        self.map_err(|e| Failure::from_error(&what(), &e))
    }
}

/// Why a ZooKeeper hold ends, in ZooKeeper's words.
pub const ZOOKEEPER_LOST: &str = "its session expired or its node was deleted";

/// The URL schemes `--connect` takes, as the library lists them (every backend's but the
/// in-process store's, which no other process can share).
fn schemes() -> String {
    let usable: Vec<String> = zklock::AnyClient::schemes()
        .filter(|(_, backend)| *backend != "mem")
        .map(|(scheme, _)| format!("{scheme}://"))
        .collect();
    usable.join(", ")
}

/// The server `--connect` names: a `file:///dir` URL, ZooKeeper hosts (or a `zk://` URL), a `redis://`
/// (`rediss://`) URL, a `postgres://` (`postgresql://`) URL or a `mysql://` (`mariadb://`) URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    File,
    ZooKeeper,
    Redis,
    Postgres,
    MySql,
}

impl Backend {
    /// The backend `--connect` names; bad usage for an unknown scheme or a malformed URL.
    pub fn of(global: &Global) -> CliResult<Backend> {
        let connect = global.connect.trim();
        let scheme = match connect.split_once("://") {
            Some((scheme, _)) => scheme.to_ascii_lowercase(),
            None => {
                // host:port,host:port/chroot; `redis:/host` or `redis:host` is a URL gone
                // wrong, not a host.
                let first = connect.split(',').next().unwrap_or_default();
                let port = first
                    .rsplit_once(':')
                    .map(|(_, rest)| rest.split('/').next());
                let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
                if port.is_some_and(|p| !p.is_some_and(digits)) {
                    return Err(Failure::usage(format!(
                        "--connect {connect:?} is neither host:port,… nor a URL: use one of \
                         {}",
                        schemes()
                    )));
                }
                return Ok(Backend::ZooKeeper);
            }
        };
        let backend = zklock::AnyClient::schemes()
            .find(|(s, _)| *s == scheme)
            .map(|(_, backend)| backend);
        match backend.unwrap_or_default() {
            "file" => Ok(Backend::File),
            "zookeeper" => Ok(Backend::ZooKeeper),
            "redis" => Ok(Backend::Redis),
            "postgres" => Ok(Backend::Postgres),
            "mysql" => Ok(Backend::MySql),
            "mem" => Err(Failure::usage(
                "--connect mem://: an in-process store lives in one process, and a command's \
                 lock would exclude nobody else: use a server's URL",
            )),
            _ => Err(Failure::usage(format!(
                "--connect: unknown scheme {scheme}://: use host:port,… for ZooKeeper or one of \
                 {}",
                schemes()
            ))),
        }
    }

    /// The backend (not ZooKeeper, whose commands use its own recipes) as the commands use it.
    #[allow(unused_variables)] // in a build with ZooKeeper alone
    pub fn site(self, global: &Global) -> CliResult<Site> {
        match self {
            Backend::ZooKeeper => unreachable!("ZooKeeper's commands use its own recipes"),
            Backend::File => backend_file::site(global),
            #[cfg(feature = "redis")]
            Backend::Redis => backend_redis::site(global),
            #[cfg(feature = "postgres")]
            Backend::Postgres => backend_postgres::site(global),
            #[cfg(feature = "mysql")]
            Backend::MySql => backend_mysql::site(global),
            #[allow(unreachable_patterns)] // every backend built
            other => {
                let feature = format!("{other:?}").to_ascii_lowercase();
                Err(Failure::new(format!(
                    "this zklock was built without {other:?}: install it with --features \
                     cli,{feature}"
                )))
            }
        }
    }
}

/// A connected ZooKeeper Client from the global options.
pub fn connect(global: &Global) -> CliResult<Client> {
    if Backend::of(global)? != Backend::ZooKeeper {
        return Err(Failure::usage(
            "this command works on ZooKeeper only; every backend has run, elect, holders and \
             watch",
        ));
    }
    // [zk://]host:port,host:port/chroot: the chroot is the namespace.
    let connect = global.connect.trim();
    let connect = connect.strip_prefix("zk://").unwrap_or(connect);
    let (hosts, chroot) = match connect.split_once('/') {
        Some((hosts, chroot)) => (hosts, Some(chroot.trim_matches('/'))),
        None => (connect, None),
    };
    let namespace = match (chroot.filter(|c| !c.is_empty()), &global.namespace) {
        (Some(_), Some(_)) => {
            return Err(Failure::usage(
                "give the namespace once: --namespace or the connect string's /chroot",
            ))
        }
        (Some(chroot), None) => Some(chroot),
        (None, ns) => ns.as_deref().map(|ns| ns.trim_start_matches('/')),
    };
    let mut builder = Client::builder(hosts)
        .session_timeout(global.session_timeout)
        .connect_timeout(global.connect_timeout);
    if let Some(ns) = namespace {
        builder = builder.namespace(ns);
    }
    let digest = match (&global.digest, &global.digest_file) {
        (Some(_), Some(_)) => {
            return Err(Failure::new(
                "give the digest once: --digest (or ZKLOCK_DIGEST) or --digest-file",
            ))
        }
        (Some(digest), None) => Some(digest.clone()),
        (None, Some(file)) => Some(first_line(file, "--digest-file")?),
        (None, None) => None,
    };
    if let Some(digest) = digest {
        let (user, pass) = digest
            .split_once(':')
            .ok_or_else(|| Failure::new("the digest must be user:password"))?;
        builder = builder.digest_auth(user, pass);
    }
    #[cfg(feature = "tls")]
    {
        if let Some(ca) = &global.tls_ca {
            builder = builder.tls_ca_pem(&read_text(ca, "--tls-ca")?);
        }
        if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
            builder = builder.tls_identity_pem(
                &read_text(cert, "--tls-cert")?,
                &read_text(key, "--tls-key")?,
            );
        }
        if global.tls_no_hostname_verification {
            builder = builder.tls_hostname_verification(false);
        }
    }
    #[cfg(feature = "sasl-digest-md5")]
    if let Some(file) = &global.sasl_file {
        let line = first_line(file, "--sasl-file")?;
        let (user, pass) = line
            .split_once(':')
            .ok_or_else(|| Failure::new("--sasl-file must hold user:password"))?;
        builder = builder.sasl_digest_md5(user, pass);
    }
    // The error names the hosts and says that it cannot connect.
    builder.connect().context(String::new)
}

/// The text of the file an option names.
pub fn read_text(path: &std::path::Path, option: &str) -> CliResult<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::from_error(&format!("{option} {}", path.display()), &e))
}

/// The first line of the file an option names (a secret kept off the command line).
fn first_line(path: &std::path::Path, option: &str) -> CliResult<String> {
    let text = read_text(path, option)?;
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

/// This machine's host name: the data of the lock nodes `run` creates.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The parsed command line; `$ZKLOCK_CONNECT` (any URL `--connect` takes) stands in for
/// `--connect` when it is not given, ahead of `$ZK_CONNECT` (its older name, which the help
/// leaves out: it reads as ZooKeeper's to a user of any other backend).
fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = matches.value_source("connect") == Some(clap::parser::ValueSource::CommandLine);
    if let (false, Ok(connect)) = (given, std::env::var("ZKLOCK_CONNECT")) {
        cli.global.connect = connect;
    }
    cli
}

/// `holders` on every backend but ZooKeeper.
fn holders(site: Site, args: HoldersArgs) -> CliResult<()> {
    let listing = (site.listing)(&args.path, args.max_leases);
    site.client.close();
    listing?.print(args.json);
    Ok(())
}

/// `watch` on every backend but ZooKeeper: the servers tell no one of a grant, so the listing
/// is read again every 250 ms and printed when who holds or waits changes.
fn watch(site: Site, args: HoldersArgs) -> CliResult<()> {
    let result = listing::watch(
        || (site.listing)(&args.path, args.max_leases),
        |_| {
            std::thread::sleep(std::time::Duration::from_millis(250));
            Ok(true)
        },
        args.json,
    );
    site.client.close();
    result
}

fn main() -> ExitCode {
    let cli = parse();
    let global = &cli.global;
    let mut command = cli.command;
    let result = Backend::of(global).map(|backend| {
        if backend == Backend::ZooKeeper {
            command.name_as_path();
        }
        (backend, command)
    });
    let result = result.and_then(|(backend, command)| match (backend, command) {
        (_, Command::Run(a)) => run::run(global, a),
        (Backend::ZooKeeper, Command::Holders(a)) => holders::holders(global, a).map(|()| 0),
        (Backend::ZooKeeper, Command::Watch(a)) => holders::watch(global, a).map(|()| 0),
        (Backend::ZooKeeper, Command::Elect(a)) => elect::elect(global, a),
        (_, Command::Revoke(a)) => revoke::revoke(global, a).map(|()| 0),
        (_, Command::Break(a)) => revoke::break_node(global, a).map(|()| 0),
        (other, Command::Holders(a)) => holders(other.site(global)?, a).map(|()| 0),
        (other, Command::Watch(a)) => watch(other.site(global)?, a).map(|()| 0),
        (other, Command::Elect(a)) => {
            let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
            elect_latch::elect(other.site(global).map_err(failed)?, a)
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zklock: error: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
