//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  # Run a nightly job on at most one machine at a time; give up after 10 minutes of waiting
  zklock --connect zk1:2181,zk2:2181 run /locks/nightly --timeout 10m -- ./nightly.sh

  # Readers share, a writer is alone; at most 3 concurrent exports
  zklock run /locks/catalog --read -- ./read-catalog
  zklock run /locks/exports --semaphore 3 -- ./export --token-from-env

  # Who holds /locks/nightly and who waits (JSON for scripts); follow it live
  zklock holders /locks/nightly --json
  zklock watch /locks/nightly

  # Ask a revocable holder to let go; delete a dead holder's node
  zklock revoke /locks/nightly/_c_0a2f...-lock-0000000042
  zklock break /locks/nightly/_c_0a2f...-lock-0000000042 --yes

  # Run a service only while this process leads, and take part again after it exits
  zklock elect /services/billing/leader --id billing-1 --requeue -- ./billing

Exit codes of `run` and `elect`: the command's own status (128+N if it died of signal N);
123 the lock or leadership was lost and the command was terminated; 124 --timeout expired,
the command never ran; 125 zklock itself failed; 126 the command could not be executed;
127 the command was not found. Other commands: 0 success, 1 failure, 2 bad usage.";

/// Apache Curator's distributed-lock recipes from the shell: run a command under a ZooKeeper
/// lock (and stop it if the lock is lost), see who holds what, revoke, break, elect.
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
    /// ZooKeeper connect string (host:port,...), a Redis URL
    /// (redis://[[user]:password@]host[:port][/db]) or a PostgreSQL URL
    /// (postgres://user:password@host[:port]/database) or a MySQL / MariaDB URL
    /// (mysql://user:password@host[:port]/database); $ZKLOCK_CONNECT, else $ZK_CONNECT
    #[arg(
        long,
        global = true,
        env = "ZK_CONNECT",
        default_value = "127.0.0.1:2181",
        value_name = "HOSTS"
    )]
    pub connect: String,
    /// Every path is relative to /NAMESPACE (Curator's namespace)
    #[arg(long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Session timeout asked of the server (e.g. 30s, 500ms, 2m)
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration, value_name = "D")]
    pub session_timeout: Duration,
    /// How long to wait for a connection to ZooKeeper
    #[arg(long, global = true, default_value = "15s", value_parser = parse_duration, value_name = "D")]
    pub connection_timeout: Duration,
    /// Digest authentication as user:password. On the command line it is visible to every
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
    /// Digest authentication read from FILE: user:password on its first line
    #[arg(long, global = true, value_name = "FILE")]
    pub digest_file: Option<std::path::PathBuf>,
    /// TLS: the PEM file of the CA that signs the servers' certificates (hosts as
    /// tcp+tls://host:port)
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
    /// SASL DIGEST-MD5 authentication read from FILE: user:password on its first line
    #[cfg(feature = "sasl-digest-md5")]
    #[arg(long, global = true, value_name = "FILE")]
    pub sasl_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock, run CMD while holding it, release when CMD exits
    ///
    /// The command gets ZKLOCK_FENCING_TOKEN (strictly rising from holder to holder) and
    /// ZKLOCK_NODE in its environment. If the lock is lost (session expired, node deleted, or
    /// connection suspended past --suspended-grace) the command and every process it started
    /// (its process group) get SIGTERM, then SIGKILL after --kill-after, and zklock exits with
    /// 123. SIGINT, SIGTERM and SIGHUP sent to zklock are forwarded to them (with --foreground
    /// the command alone is signalled, and a terminal's Ctrl-C reaches it directly).
    Run(RunArgs),
    /// List the queue of a lock path in lock order: who holds, who waits
    Holders(HoldersArgs),
    /// Like `holders`, printed again on every change (from ZooKeeper watches) until Ctrl-C
    Watch(HoldersArgs),
    /// Ask the holder of a lock node to release it (Curator's cooperative revocation)
    Revoke(NodeArgs),
    /// Delete a lock node (e.g. of a hung holder) after showing its owner and asking
    Break(BreakArgs),
    /// Run CMD while this process leads the election on PATH (Curator's LeaderSelector)
    Elect(ElectArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock path, e.g. /locks/nightly
    pub path: String,
    /// Give up waiting after D: exit 124 without running the command
    #[arg(long, short = 'w', value_parser = parse_duration, value_name = "D")]
    pub timeout: Option<Duration>,
    /// Take the read half of a read-write lock (shared with other readers)
    #[arg(long, conflicts_with_all = ["write", "semaphore"])]
    pub read: bool,
    /// Take the write half of a read-write lock
    #[arg(long, conflicts_with = "semaphore")]
    pub write: bool,
    /// Take one lease of a semaphore of N leases (Curator's InterProcessSemaphoreV2)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub semaphore: Option<u32>,
    /// Treat a connection suspended longer than D as a lost lock (default: only a lost
    /// session counts, reported after a session timeout without a connection)
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub suspended_grace: Option<Duration>,
    /// After SIGTERM to the command (lock lost), wait D before SIGKILL
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "D")]
    pub kill_after: Duration,
    /// Keep the command in zklock's process group, so that it can read from the terminal and
    /// gets the terminal's signals (Ctrl-C) itself; then only the command is stopped when the
    /// lock is lost, not the processes it started (as `timeout --foreground`). By default the
    /// command leads a process group of its own, and the whole group is stopped.
    #[arg(long)]
    pub foreground: bool,
    /// Honour `zklock revoke`: on a revocation request, SIGTERM the command and release when
    /// it exits (mutex and read-write only)
    #[arg(long, conflicts_with = "semaphore")]
    pub revocable: bool,
    /// Say nothing while waiting, even on a terminal
    #[arg(long, short)]
    pub quiet: bool,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HoldersArgs {
    /// The lock path (the parent of the lock nodes; for a semaphore, the semaphore's path)
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
    /// The election path (Curator's LeaderSelector path)
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
    #[arg(last = true, required = true, value_name = "CMD")]
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
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
