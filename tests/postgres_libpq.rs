//! libpq's conventions against a real server with password authentication: the `PG*`
//! environment variables with a bare `postgres://` URL, a password file (`~/.pgpass`,
//! `PGPASSFILE`, `passfile=`), key-value connection strings (TCP and a Unix socket), and a
//! wrong password refused with `AuthFailed` naming the user.
//!
//! The environment is read by worker processes (this binary run again as one of its tests):
//! the tests never change their own process's environment.

mod common;

use std::fs;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::worker::Worker;
use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::{Error, PgClient};

/// The variable that makes a run of this binary a worker, and names the lock it takes.
const WORKER: &str = "ZKLOCK_LIBPQ_WORKER";

/// A directory of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "zklock-libpq-{what}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `contents` to `name` with permissions `mode`.
    fn file(&self, name: &str, contents: &str, mode: u32) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, contents).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a worker said: `connected` (it holds the lock named in its variable until its
/// standard input closes) or `failed …` with the error, then its exit.
struct Run(Worker);

impl Run {
    /// Runs the worker with `connect` as its connection string and `env` as its only `PG*`
    /// variables and `HOME`.
    fn start(connect: &str, lock: &str, env: &[(&str, &str)], home: &Path) -> Run {
        let mut cmd = Worker::command("worker");
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PG") {
                cmd.env_remove(k);
            }
        }
        cmd.env(WORKER, format!("{lock}\n{connect}"))
            .env("HOME", home)
            .envs(env.iter().copied());
        Run(Worker::spawn(cmd))
    }

    /// The worker's report.
    fn said(&self) -> String {
        self.0.next_line()
    }
}

/// The worker: connects with the connection string it was given and the environment it was
/// started with, holds the lock and says so (or says why not).
#[test]
fn worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return;
    };
    let (lock, connect) = args.split_once('\n').unwrap();
    match PgClient::connect(connect) {
        Ok(client) => {
            let mutex = PgMutex::new(&client, lock).unwrap();
            let _guard = mutex.lock().unwrap();
            println!("worker: connected {client:?}");
            let _ = std::io::stdin().lock().lines().next();
        }
        Err(e) => println!("worker: failed {e:?}"),
    }
}

/// The `application_name` and database of the session that holds `lock`.
fn holder(server: &TestingPostgres, lock: &str) -> (String, String) {
    let rows = server
        .sql(&format!(
            "SELECT a.application_name, a.datname FROM pg_locks l \
             JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted \
             AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('{lock}', 0)"
        ))
        .unwrap();
    let row = rows.first().expect("a holder");
    (
        row[0].clone().unwrap_or_default(),
        row[1].clone().unwrap_or_default(),
    )
}

/// The cause of a failed connect.
fn cause(e: Error) -> Error {
    match e {
        Error::ConnectFailed { cause, .. } => *cause,
        other => other,
    }
}

#[test]
fn a_bare_url_connects_with_the_pg_environment_variables() {
    let server = TestingPostgres::start().unwrap();
    let home = Scratch::new("home");
    let port = server.port().to_string();
    let env = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", port.as_str()),
        ("PGUSER", "zklock"),
        ("PGPASSWORD", server.password()),
        ("PGDATABASE", "template1"),
        ("PGAPPNAME", "libpq-env"),
    ];
    for connect in ["postgres://", "postgresql:///", ""] {
        let run = Run::start(connect, "env", &env, &home.0);
        let said = run.said();
        assert!(said.starts_with("connected"), "{connect:?}: {said}");
        assert!(
            said.contains(&format!("zklock@127.0.0.1:{port}/template1")),
            "{said}"
        );
        assert_eq!(
            holder(&server, "env"),
            ("libpq-env".to_owned(), "template1".to_owned())
        );
    }
    // What the string gives goes before the environment.
    let run = Run::start(
        "postgres:///postgres?application_name=given",
        "env",
        &env,
        &home.0,
    );
    assert!(run.said().starts_with("connected"));
    assert_eq!(
        holder(&server, "env"),
        ("given".to_owned(), "postgres".to_owned())
    );
    drop(run);
    // A wrong PGPASSWORD is refused, naming the user.
    let mut wrong = env;
    wrong[3].1 = "not-the-password";
    let said = Run::start("postgres://", "env", &wrong, &home.0).said();
    assert!(
        said.starts_with("failed") && said.contains("AuthFailed") && said.contains("zklock"),
        "{said}"
    );
}

#[test]
fn a_password_file_gives_the_password_when_none_is_given() {
    let server = TestingPostgres::start().unwrap();
    let port = server.port();
    let home = Scratch::new("pgpass");
    // Earlier lines that do not match, a comment, then one with a wildcard and an escaped
    // colon in the password field (the password has none: `\:` would be one).
    let pw = server.password();
    let lines = format!(
        "# host:port:database:user:password\n\
         127.0.0.1:{port}:postgres:someone-else:nope\n\
         127.0.0.1:1:*:zklock:nope\n\
         127.0.0.1:{port}:*:zklock:{pw}\n\
         *:*:*:*:last-resort\n"
    );
    home.file(".pgpass", &lines, 0o600);
    let env = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", &port.to_string()),
        ("PGUSER", "zklock"),
    ]
    .map(|(k, v)| (k, v.to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // ~/.pgpass.
    let run = Run::start("postgres:///postgres", "pgpass", &env, &home.0);
    let said = run.said();
    assert!(said.starts_with("connected"), "~/.pgpass: {said}");
    drop(run);
    // PGPASSFILE, in place of ~/.pgpass.
    let elsewhere = Scratch::new("passfile");
    let file = elsewhere.file("pw", &format!("*:*:*:zklock:{pw}\n"), 0o600);
    let mut with = env.clone();
    let file_s = file.display().to_string();
    with.push(("PGPASSFILE", &file_s));
    let empty_home = Scratch::new("empty");
    let said = Run::start("postgres:///postgres", "pgpass", &with, &empty_home.0).said();
    assert!(said.starts_with("connected"), "PGPASSFILE: {said}");
    // passfile= in a key-value string, in this process.
    let kv = format!("host=127.0.0.1 port={port} user=zklock dbname=postgres passfile='{file_s}'");
    let client = PgClient::connect(&kv).expect("passfile= connects");
    drop(client);
    // A password given goes before the file: a wrong one is refused, naming the user.
    let wrong = PgClient::connect(&format!("{kv} password=wrong")).unwrap_err();
    match cause(wrong) {
        Error::AuthFailed(why) => assert!(why.contains("zklock"), "{why}"),
        other => panic!("not AuthFailed: {other:?}"),
    }
    // A wrong password from the file is refused, naming the user and the file.
    let bad = elsewhere.file("bad", "*:*:*:zklock:wrong\n", 0o600);
    let kv_bad = format!(
        "host=127.0.0.1 port={port} user=zklock dbname=postgres passfile={}",
        bad.display()
    );
    match cause(PgClient::connect(&kv_bad).unwrap_err()) {
        Error::AuthFailed(why) => {
            assert!(
                why.contains("zklock") && why.contains(&bad.display().to_string()),
                "{why}"
            )
        }
        other => panic!("not AuthFailed: {other:?}"),
    }
    // A file others may read is ignored, as libpq ignores it: no password.
    let open = elsewhere.file("open", &format!("*:*:*:zklock:{pw}\n"), 0o644);
    let kv_open = format!(
        "host=127.0.0.1 port={port} user=zklock dbname=postgres passfile={}",
        open.display()
    );
    match cause(PgClient::connect(&kv_open).unwrap_err()) {
        Error::AuthFailed(why) => assert!(why.contains("zklock"), "{why}"),
        other => panic!("not AuthFailed: {other:?}"),
    }
}

#[test]
fn key_value_strings_connect_over_tcp_and_a_unix_socket() {
    let server = TestingPostgres::start().unwrap();
    let port = server.port();
    let pw = server.password();
    let kv = format!(
        "host=127.0.0.1 port = {port} user=zklock password='{pw}' dbname=postgres \
         application_name='key value'"
    );
    let client = PgClient::connect(&kv).expect("a key-value string connects");
    let mutex = PgMutex::new(&client, "kv").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(
        holder(&server, "kv"),
        ("key value".to_owned(), "postgres".to_owned())
    );
    guard.release().unwrap();
    // A wrong password is refused, naming the user, and not shown.
    let wrong = format!("host=127.0.0.1 port={port} user=zklock password='n0t\\'it'");
    let e = PgClient::connect(&wrong).unwrap_err();
    assert!(!format!("{e:?} {e}").contains("n0t"), "{e:?}");
    match cause(e) {
        Error::AuthFailed(why) => assert!(why.contains("\"zklock\""), "{why}"),
        other => panic!("not AuthFailed: {other:?}"),
    }
    // The server's Unix socket (its directory as the host), where local connections are
    // trusted.
    let socket = format!(
        "host={} port={port} user=zklock dbname=postgres",
        server.dir().display()
    );
    let client = PgClient::connect(&socket).expect("a Unix socket connects");
    let mutex = PgMutex::new(&client, "unix").unwrap();
    let guard = mutex.lock().unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().unwrap();
}

#[test]
fn a_service_file_section_gives_the_keywords_the_string_leaves_out() {
    let server = TestingPostgres::start().unwrap();
    let port = server.port();
    let pw = server.password();
    let home = Scratch::new("service");
    let section = format!(
        "# services\n\
         [zk-app]\n\
         host=127.0.0.1\n\
         port={port}\n\
         user=zklock\n\
         password={pw}\n\
         dbname=template1\n\
         application_name=from-service\n"
    );
    home.file(".pg_service.conf", &section, 0o600);
    // `service=` in the string, from ~/.pg_service.conf.
    let run = Run::start("service=zk-app", "service", &[], &home.0);
    let said = run.said();
    assert!(said.starts_with("connected"), "service=: {said}");
    assert_eq!(
        holder(&server, "service"),
        ("from-service".to_owned(), "template1".to_owned())
    );
    drop(run);
    // PGSERVICE with a bare URL; what the URL gives goes before the service's.
    let run = Run::start(
        "postgres:///postgres",
        "service",
        &[("PGSERVICE", "zk-app")],
        &home.0,
    );
    let said = run.said();
    assert!(said.starts_with("connected"), "PGSERVICE: {said}");
    assert_eq!(
        holder(&server, "service"),
        ("from-service".to_owned(), "postgres".to_owned())
    );
    drop(run);
    // PGSERVICEFILE names another file; a service no file defines is refused by name.
    let elsewhere = Scratch::new("service-file");
    let file = elsewhere.file("services", &section.replace("zk-app", "moved"), 0o644);
    let file = file.display().to_string();
    let empty_home = Scratch::new("service-empty");
    let said = Run::start(
        "service=moved",
        "service",
        &[("PGSERVICEFILE", &file)],
        &empty_home.0,
    )
    .said();
    assert!(said.starts_with("connected"), "PGSERVICEFILE: {said}");
    let said = Run::start(
        "service=zk-app",
        "service",
        &[("PGSERVICEFILE", &file)],
        &empty_home.0,
    )
    .said();
    assert!(
        said.starts_with("failed") && said.contains("\\\"zk-app\\\" not found"),
        "{said}"
    );
}

#[cfg(feature = "tls")]
#[test]
fn the_ca_in_the_home_postgresql_directory_is_trusted_by_default() {
    let server = TestingPostgres::start_tls().unwrap();
    let url = format!(
        "postgres://zklock:{}@localhost:{}/postgres?sslmode=verify-full",
        server.password(),
        server.port()
    );
    let home = Scratch::new("root-crt");
    fs::create_dir(home.0.join(".postgresql")).unwrap();
    home.file(
        ".postgresql/root.crt",
        server.tls().unwrap().ca_pem(),
        0o600,
    );
    let said = Run::start(&url, "root-crt", &[], &home.0).said();
    assert!(
        said.starts_with("connected"),
        "~/.postgresql/root.crt: {said}"
    );
    // Without it, the server's certificate is checked against the system's CAs, which do not
    // know the test's CA.
    let empty_home = Scratch::new("root-crt-empty");
    let said = Run::start(&url, "root-crt", &[], &empty_home.0).said();
    assert!(said.starts_with("failed"), "no root.crt: {said}");
}
