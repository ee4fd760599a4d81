//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  # Run a nightly job on at most one machine at a time; give up after 10 minutes of waiting
  zklock --connect file:///var/lock/app run nightly -n -- ./nightly.sh  # one host, no server
  zklock --connect zk1:2181,zk2:2181 run nightly --timeout 10m -- ./nightly.sh
  zklock --connect redis://cache:6379 run nightly --timeout 10m -- ./nightly.sh
  zklock --connect postgres://app@db/app run nightly --timeout 10m -- ./nightly.sh
  zklock --connect mysql://app@db/app run nightly -n -- ./nightly.sh   # skip if busy

  # Readers share, a writer is alone; at most 3 concurrent exports
  zklock run catalog --read -- ./read-catalog
  zklock run exports --semaphore 3 -- ./export --token-from-env

  # Who holds nightly and who waits (one JSON schema on every backend); follow it live
  zklock holders nightly --json
  zklock watch nightly

  # ZooKeeper: ask a revocable holder to let go; delete a dead holder's node
  zklock revoke /nightly/_c_0a2f...-lock-0000000042
  zklock break /nightly/_c_0a2f...-lock-0000000042 --yes

  # Run a service only while this process leads, and take part again after it exits
  zklock elect billing-leader --id billing-1 --requeue -- ./billing

--connect (or $ZKLOCK_CONNECT) picks the backend: file:///dir for the processes of one host,
host:port,... or zk://host:port,.../chroot for ZooKeeper (a name is the path /name), redis://, rediss://,
redis+sentinel://host,.../primary or redis+cluster://host,... (rediss+sentinel://,
rediss+cluster:// for TLS), postgres:// or postgresql://, mysql:// or mariadb://.

Exit codes of `run` and `elect`: the command's own status (128+N if it died of signal N);
123 the lock or leadership was lost and the command was terminated; 124 --timeout expired
or -n found the lock busy, the command never ran; 125 zklock itself failed; 126 the command
could not be executed; 127 the command was not found. Other commands: 0 success, 1 failure,
2 bad usage (an unknown option or scheme, an option the backend does not have).";

/// Distributed locks from the shell, on one host's files, ZooKeeper (Apache Curator's recipes),
/// Redis, PostgreSQL, MySQL or MariaDB: run a command under a lock (and stop it if the lock is lost),
/// see who holds what, elect a leader; on ZooKeeper also revoke and break.
#[derive(Debug, Parser)]
#[command(name = "zklock", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Where the locks live: a directory of this host (file:///dir), a ZooKeeper connect string
    /// (host:port,...[/chroot], or zk://host:port,.../chroot), a Redis URL
    /// (redis://[[user]:password@]host[:port][/db]), a PostgreSQL URL
    /// (postgres://user:password@host[:port]/database) or a MySQL / MariaDB URL
    /// (mysql://user:password@host[:port]/database). Default: $ZKLOCK_CONNECT, else a
    /// ZooKeeper server on 127.0.0.1:2181
    #[arg(
        long,
        global = true,
        env = "ZK_CONNECT",
        hide_env = true,
        default_value = "127.0.0.1:2181",
        hide_default_value = true,
        value_name = "URL"
    )]
    pub connect: String,
    /// ZooKeeper: every path is relative to /NAMESPACE (Curator's namespace)
    #[arg(long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// How long the server keeps a silent holder's locks (ZooKeeper's session timeout, the TTL
    /// on Redis, the database session's limit on PostgreSQL and MySQL; on file:// the kernel
    /// frees a dead process's locks at once), e.g. 30s, 500ms, 2m
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration, value_name = "D")]
    pub session_timeout: Duration,
    /// How long to wait for a connection to the server (not on file://)
    #[arg(
        long,
        global = true,
        alias = "connection-timeout",
        default_value = "10s",
        value_parser = parse_duration,
        value_name = "D"
    )]
    pub connect_timeout: Duration,
    /// ZooKeeper: digest authentication as user:password. On the command line it is visible to every
    /// user of the machine (ps) for as long as zklock runs: prefer ZKLOCK_DIGEST or
    /// --digest-file
    #[arg(
        long,
        global = true,
        env = "ZKLOCK_DIGEST",
        hide_env_values = true,
        value_name = "USER:PASS"
    )]
    pub digest: Option<String>,
    /// ZooKeeper: digest authentication read from FILE: user:password on its first line
    #[arg(long, global = true, value_name = "FILE")]
    pub digest_file: Option<std::path::PathBuf>,
    /// TLS (ZooKeeper, Redis, PostgreSQL): the PEM file of the CA that signs the servers'
    /// certificates (ZooKeeper hosts as tcp+tls://host:port)
    #[cfg(feature = "tls")]
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// TLS client certificate (PEM), with --tls-key
    #[cfg(feature = "tls")]
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS client key (PEM), with --tls-cert
    #[cfg(feature = "tls")]
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Do not check that a server's certificate names its host
    #[cfg(feature = "tls")]
    #[arg(long, global = true)]
    pub tls_no_hostname_verification: bool,
    /// ZooKeeper: SASL DIGEST-MD5 authentication read from FILE: user:password on its first line
    #[cfg(feature = "sasl-digest-md5")]
    #[arg(long, global = true, value_name = "FILE")]
    pub sasl_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock, run CMD while holding it, release when CMD exits
    ///
    /// The command gets ZKLOCK_FENCING_TOKEN (strictly rising from holder to holder) and
    /// ZKLOCK_NODE in its environment. If the lock is lost (a ZooKeeper session expired or its
    /// node deleted, a Redis key's TTL ran out, a database session ended, or the connection
    /// was suspended past --suspended-grace) the command and every process it started
    /// (its process group) get SIGTERM, then SIGKILL after --kill-after, and zklock exits with
    /// 123. SIGINT, SIGTERM and SIGHUP sent to zklock are forwarded to them (with --foreground
    /// the command alone is signalled, and a terminal's Ctrl-C reaches it directly).
    Run(RunArgs),
    /// Who holds a lock and who waits, in lock order (one table, or one JSON schema, on every
    /// backend)
    Holders(HoldersArgs),
    /// Like `holders`, printed again with the time on every change until Ctrl-C (ZooKeeper's
    /// watches; every 250 ms elsewhere)
    Watch(HoldersArgs),
    /// ZooKeeper: ask the holder of a lock node to release it (Curator's revocation)
    Revoke(NodeArgs),
    /// ZooKeeper: delete a lock node (e.g. of a hung holder) after showing its owner and asking
    Break(BreakArgs),
    /// Run CMD while this process leads the election on NAME (Curator's LeaderSelector on
    /// ZooKeeper, the backend's leader latch elsewhere)
    Elect(ElectArgs),
}

impl Command {
    /// On ZooKeeper a lock name is a path: `name` means `/name`, as the library's `connect`
    /// takes it, so that one name means the same on every backend.
    pub fn name_as_path(&mut self) {
        let path = match self {
            Command::Run(a) => &mut a.path,
            Command::Holders(a) | Command::Watch(a) => &mut a.path,
            Command::Elect(a) => &mut a.path,
            Command::Revoke(_) | Command::Break(_) => return,
        };
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name (on ZooKeeper its path; `nightly` is `/nightly`)
    pub path: String,
    /// Give up waiting after D: exit 124 without running the command
    #[arg(long, short = 'w', value_parser = parse_duration, value_name = "D")]
    pub timeout: Option<Duration>,
    /// Do not wait: if the lock is busy, exit 124 without running the command (as flock -n;
    /// the same as --timeout 0)
    #[arg(long, short = 'n', conflicts_with = "timeout")]
    pub nonblock: bool,
    /// Take the read half of a read-write lock (shared with other readers)
    #[arg(long, conflicts_with_all = ["write", "semaphore"])]
    pub read: bool,
    /// Take the write half of a read-write lock
    #[arg(long, conflicts_with = "semaphore")]
    pub write: bool,
    /// Take one lease of a semaphore of N leases (on ZooKeeper Curator's
    /// InterProcessSemaphoreV2)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub semaphore: Option<u32>,
    /// Treat a connection suspended longer than D as a lost lock (default: only a lost
    /// session counts, reported after a session timeout without a connection)
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub suspended_grace: Option<Duration>,
    /// After SIGTERM to the command (lock lost), wait D before SIGKILL
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "D")]
    pub kill_after: Duration,
    /// Hold the lock (or lease) for at most D: then it is let go of on the server (another
    /// process can take it) and the command is stopped as on a lost lock
    #[arg(long, value_parser = parse_max_hold, value_name = "D")]
    pub max_hold: Option<Duration>,
    /// Keep the command in zklock's process group, so that it can read from the terminal and
    /// gets the terminal's signals (Ctrl-C) itself; then only the command is stopped when the
    /// lock is lost, not the processes it started (as `timeout --foreground`). By default the
    /// command leads a process group of its own, and the whole group is stopped.
    #[arg(long)]
    pub foreground: bool,
    /// ZooKeeper: honour `zklock revoke`: on a revocation request, SIGTERM the command and
    /// release when it exits (mutex and read-write only)
    #[arg(long, conflicts_with = "semaphore")]
    pub revocable: bool,
    /// Say nothing while waiting, even on a terminal
    #[arg(long, short)]
    pub quiet: bool,
    /// The command and its arguments
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HoldersArgs {
    /// The lock's name (on ZooKeeper the parent of the lock nodes; for a semaphore, the
    /// semaphore's path)
    pub path: String,
    /// The semaphore's number of leases, to tell which leases hold (unknown otherwise)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_leases: Option<u32>,
    /// One JSON document per listing instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The full path of a lock node, e.g. /locks/a/_c_<uuid>-lock-0000000007
    pub node: String,
}

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// The full path of a lock node, e.g. /locks/a/_c_<uuid>-lock-0000000007
    pub node: String,
    /// Do not ask for confirmation
    #[arg(long, short)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name (on ZooKeeper Curator's LeaderSelector path)
    pub path: String,
    /// Participant id, written into our node (default: host name and process id)
    #[arg(long)]
    pub id: Option<String>,
    /// Take part again after CMD exits (run CMD again when elected again); stop with Ctrl-C
    #[arg(long)]
    pub requeue: bool,
    /// Treat a connection suspended longer than D as lost leadership (default: only a lost
    /// session counts)
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub suspended_grace: Option<Duration>,
    /// After SIGTERM to the command (leadership lost), wait D before SIGKILL
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "D")]
    pub kill_after: Duration,
    /// Keep the command in zklock's process group, so that it can read from the terminal and
    /// gets the terminal's signals (Ctrl-C) itself; then only the command is stopped when the
    /// lock is lost, not the processes it started (as `timeout --foreground`). By default the
    /// command leads a process group of its own, and the whole group is stopped.
    #[arg(long)]
    pub foreground: bool,
    /// The command and its arguments
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `500ms`, `10s`, `1.5s`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 500ms, 10s, 2m, 1h)"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use ms, s, m or h)"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{s:?}: {e}"))
}

/// A duration above zero (a hold capped at zero would end as it begins).
pub fn parse_max_hold(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("--max-hold must be above zero".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn the_command_needs_no_double_dash_when_unambiguous() {
        let command = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Run(a) => (a.command, a.timeout),
            other => panic!("{other:?}"),
        };
        let sh = ["sh", "-c", "exit 3"].map(String::from).to_vec();
        assert_eq!(
            command(&["zklock", "run", "x", "sh", "-c", "exit 3"]),
            (sh.clone(), None)
        );
        assert_eq!(
            command(&["zklock", "run", "x", "--", "sh", "-c", "exit 3"]),
            (sh.clone(), None)
        );
        let timeout = Some(Duration::from_secs(1));
        assert_eq!(
            command(&[
                "zklock",
                "run",
                "x",
                "--timeout",
                "1s",
                "sh",
                "-c",
                "exit 3"
            ]),
            (sh, timeout)
        );
        // After the command's first word, everything is the command's.
        let (cmd, timeout) = command(&["zklock", "run", "x", "ls", "--timeout", "1s"]);
        assert_eq!((cmd.len(), timeout), (3, None));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
