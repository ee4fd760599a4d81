//! `zklock`: Apache Curator's lock recipes from the shell. See `zklock --help` and
//! `docs/cli.md`.
#![deny(unsafe_code)]

mod args;
#[cfg(feature = "mysql")]
mod backend_mysql;
#[cfg(feature = "postgres")]
mod backend_postgres;
#[cfg(feature = "redis")]
mod backend_redis;
mod child;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
mod contender;
mod elect;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
mod elect_latch;
mod holders;
mod revoke;
mod run;

use std::fmt;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use zklock::Client;

use crate::args::{Cli, Command, ElectArgs, Global, HoldersArgs, RunArgs};

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

    /// `context: error: cause: cause...`
    pub fn from_error(context: &str, error: &(dyn std::error::Error + 'static)) -> Failure {
        let mut message = format!("{context}: {error}");
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

    pub fn with_code(mut self, code: u8) -> Failure {
        self.code = code;
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

/// The server `--connect` names: ZooKeeper hosts, a `redis://` (`rediss://`) URL or a
/// `postgres://` (`postgresql://`) URL or a `mysql://` (`mariadb://`) URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    ZooKeeper,
    Redis,
    Postgres,
    MySql,
}

/// What each backend does for the commands every backend has.
#[derive(Debug)]
pub struct Commands {
    pub contender: fn(&Global, &RunArgs) -> CliResult<Box<dyn run::Contend>>,
    pub elect: fn(&Global, ElectArgs) -> CliResult<u8>,
    pub holders: fn(&Global, HoldersArgs) -> CliResult<()>,
    pub watch: fn(&Global, HoldersArgs) -> CliResult<()>,
}

impl Backend {
    pub fn of(global: &Global) -> Backend {
        let connect = global.connect.trim();
        let scheme = match connect.split_once("://") {
            Some((scheme, _)) => scheme.to_ascii_lowercase(),
            None => return Backend::ZooKeeper,
        };
        match scheme.as_str() {
            "redis" | "rediss" => Backend::Redis,
            "postgres" | "postgresql" => Backend::Postgres,
            "mysql" | "mariadb" => Backend::MySql,
            _ => Backend::ZooKeeper,
        }
    }

    pub fn commands(self) -> Commands {
        match self {
            Backend::ZooKeeper => Commands {
                contender: run::zookeeper_contender,
                elect: elect::elect,
                holders: holders::holders,
                watch: holders::watch,
            },
            Backend::Redis => Commands {
                contender: backend_redis::contender,
                elect: backend_redis::elect,
                holders: backend_redis::holders,
                watch: backend_redis::watch,
            },
            Backend::Postgres => Commands {
                contender: backend_postgres::contender,
                elect: backend_postgres::elect,
                holders: backend_postgres::holders,
                watch: backend_postgres::watch,
            },
            Backend::MySql => Commands {
                contender: backend_mysql::contender,
                elect: backend_mysql::elect,
                holders: backend_mysql::holders,
                watch: backend_mysql::watch,
            },
        }
    }
}

/// A backend's commands in a build without it: each says how to build it in.
#[cfg(not(all(feature = "redis", feature = "postgres", feature = "mysql")))]
macro_rules! missing_backend {
    ($module:ident, $name:literal, $features:literal) => {
        mod $module {
            use crate::args::{ElectArgs, Global, HoldersArgs, RunArgs};
            use crate::run::Contend;
            use crate::{CliResult, Failure};

            fn missing() -> Failure {
                Failure::new(concat!(
                    "this zklock was built without ",
                    $name,
                    ": install it with --features ",
                    $features
                ))
            }

            pub fn contender(_: &Global, _: &RunArgs) -> CliResult<Box<dyn Contend>> {
                Err(missing())
            }

            pub fn elect(_: &Global, _: ElectArgs) -> CliResult<u8> {
                Err(missing())
            }

            pub fn holders(_: &Global, _: HoldersArgs) -> CliResult<()> {
                Err(missing())
            }

            pub fn watch(_: &Global, _: HoldersArgs) -> CliResult<()> {
                Err(missing())
            }
        }
    };
}

#[cfg(not(feature = "redis"))]
missing_backend!(backend_redis, "Redis", "cli,redis");
#[cfg(not(feature = "postgres"))]
missing_backend!(backend_postgres, "PostgreSQL", "cli,postgres");
#[cfg(not(feature = "mysql"))]
missing_backend!(backend_mysql, "MySQL", "cli,mysql");

/// A connected ZooKeeper Client from the global options.
pub fn connect(global: &Global) -> CliResult<Client> {
    if Backend::of(global) != Backend::ZooKeeper {
        return Err(Failure::new(
            "this command works on ZooKeeper only; on Redis and PostgreSQL there are run, \
             elect, holders and watch",
        ));
    }
    let mut builder = Client::builder(&global.connect)
        .session_timeout(global.session_timeout)
        .connection_timeout(global.connection_timeout);
    if let Some(ns) = &global.namespace {
        builder = builder.namespace(ns.trim_start_matches('/'));
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
    builder
        .connect()
        .context(|| format!("cannot connect to {}", global.connect))
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

/// The parsed command line; `$ZKLOCK_CONNECT` (a ZooKeeper connect string, a `redis://` or a
/// `postgres://` URL) stands in for `--connect` when it is not given, ahead of `$ZK_CONNECT`.
fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = matches.value_source("connect") == Some(clap::parser::ValueSource::CommandLine);
    if let (false, Ok(connect)) = (given, std::env::var("ZKLOCK_CONNECT")) {
        cli.global.connect = connect;
    }
    cli
}

fn main() -> ExitCode {
    let cli = parse();
    let commands = Backend::of(&cli.global).commands();
    let result = match cli.command {
        Command::Run(a) => run::run(&cli.global, a),
        Command::Holders(a) => (commands.holders)(&cli.global, a).map(|()| 0),
        Command::Watch(a) => (commands.watch)(&cli.global, a).map(|()| 0),
        Command::Revoke(a) => revoke::revoke(&cli.global, a).map(|()| 0),
        Command::Break(a) => revoke::break_node(&cli.global, a).map(|()| 0),
        Command::Elect(a) => (commands.elect)(&cli.global, a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zklock: error: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
