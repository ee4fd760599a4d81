//! libpq's connection conventions, which tokio-postgres leaves out: a connection string is a
//! `postgres://` URL or a key-value string (`host=db user=app password='it\'s'`); a keyword
//! it does not give comes from its `PG*` environment variable, else from libpq's default; the
//! password, when neither gives one, from the password file (`passfile`, `PGPASSFILE`, else
//! `~/.pgpass`); a `service` (or `PGSERVICE`) names a section of the service file whose
//! keywords come after the string's and before the environment's. tokio-postgres parses both forms but reads no environment and no password
//! file, and fills a URL's missing port with 5432 (so an environment's could not apply): the
//! string is parsed here into the keywords it gives, completed, and handed to tokio-postgres
//! as a key-value string.
//!
//! Everything the process provides (variables, home directory, user name, files) comes through
//! [`Env`], so that the rules are tested without touching the process's environment.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The keywords a connection string gives, in order; a keyword given twice keeps its last
/// value, as in libpq.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    fn take(&mut self, key: &str) -> Option<String> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    /// A given value that is not empty (libpq takes an empty value as the default).
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// As a key-value string, every value quoted.
    fn to_key_values(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.0 {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(k);
            s.push_str("='");
            for c in v.chars() {
                if c == '\'' || c == '\\' {
                    s.push('\\');
                }
                s.push(c);
            }
            s.push('\'');
        }
        s
    }
}

/// The keywords read from the environment when the string does not give them, with their
/// variables (libpq's, for the keywords tokio-postgres or zklock reads).
const ENVIRONMENT: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("dbname", "PGDATABASE"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("passfile", "PGPASSFILE"),
    ("options", "PGOPTIONS"),
    ("application_name", "PGAPPNAME"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("target_session_attrs", "PGTARGETSESSIONATTRS"),
    ("channel_binding", "PGCHANNELBINDING"),
    ("load_balance_hosts", "PGLOADBALANCEHOSTS"),
];

/// The Unix socket directories a host-less connection string reaches, in order: Debian's
/// (libpq's default there) and upstream's. Each is also the "default socket directory" that a
/// password file's `localhost` matches.
const SOCKET_DIRS: &[&str] = &["/var/run/postgresql", "/run/postgresql", "/tmp"];

/// What the process provides.
pub(crate) trait Env {
    /// An environment variable's value.
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory: `$HOME`, else the password database's.
    fn home(&self) -> Option<PathBuf>;
    /// The operating system's user name (the user a string without one connects as).
    fn os_user(&self) -> Option<String>;
    /// Whether `path` exists (a server's Unix socket).
    fn exists(&self, path: &Path) -> bool;
    /// A password file's contents; `None` when there is none, or it is ignored (with a
    /// warning, as libpq prints one: not a plain file, or open to the group or others).
    fn passfile(&self, path: &Path) -> Option<String>;
    /// A service file's contents; `Ok(None)` when there is no such file.
    fn service_file(&self, path: &Path) -> std::io::Result<Option<String>>;
}

/// The process's own environment.
pub(crate) struct Process;

impl Env for Process {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn home(&self) -> Option<PathBuf> {
        match self.var("HOME") {
            Some(h) if !h.is_empty() => Some(PathBuf::from(h)),
            _ => std::env::home_dir(),
        }
    }

    fn os_user(&self) -> Option<String> {
        whoami::username().ok()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn service_file(&self, path: &Path) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn passfile(&self, path: &Path) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).ok()?;
        if let Some(why) = ignored(meta.is_file(), meta.permissions().mode()) {
            tracing::warn!("zklock: password file {:?} {why}: ignored", path);
            return None;
        }
        match std::fs::read_to_string(path) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("zklock: password file {:?} cannot be read: {e}", path);
                None
            }
        }
    }
}

/// Why libpq ignores a password file, from its type and permissions.
fn ignored(plain_file: bool, mode: u32) -> Option<&'static str> {
    if !plain_file {
        Some("is not a plain file")
    } else if mode & 0o077 != 0 {
        Some("has group or world access; permissions should be u=rw (0600) or less")
    } else {
        None
    }
}

/// The TLS files a connection string names (each `None` when not named, or named empty).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct SslFiles {
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// A connection string with the environment's values and the defaults filled in.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The session's options for tokio-postgres.
    pub(crate) config: tokio_postgres::Config,
    /// `sslmode`, which zklock reads itself (tokio-postgres knows three of its six values).
    pub(crate) sslmode: String,
    /// `sslrootcert`, `sslcert` and `sslkey`: the files of the CA and the client's
    /// certificate and key (PEM), which zklock reads itself when TLS is asked for.
    pub(crate) ssl_files: SslFiles,
    /// `connect_timeout` in seconds, when given (0 or less: not given).
    pub(crate) connect_timeout: Option<Duration>,
    /// The password file the password came from.
    pub(crate) passfile: Option<PathBuf>,
}

/// `s` (a URL or a key-value string) completed as libpq completes it: a keyword the string
/// does not give is taken from its environment variable, else from the default (host: a Unix
/// socket directory that has the server's socket, else `localhost`; port 5432; user: the
/// operating system's; database: the user's name; `application_name`: `zklock`), and the
/// password, when neither gives one, from the password file. Errors are the reason, without
/// the string.
pub(crate) fn resolve(s: &str, env: &dyn Env) -> Result<Settings, String> {
    let mut p = parse(s)?;
    let named = p
        .take("service")
        .or_else(|| env.var("PGSERVICE"))
        .filter(|v| !v.is_empty());
    if let Some(name) = named {
        for (key, value) in service(&name, env)? {
            if p.get(&key).is_none() {
                p.set(&key, value);
            }
        }
    }
    for &(key, var) in ENVIRONMENT {
        if p.get(key).is_none() {
            if let Some(v) = env.var(var) {
                p.set(key, v);
            }
        }
    }
    if p.value("port").is_none() {
        p.set("port", "5432");
    }
    let port = p.value("port").unwrap_or_default().to_owned();
    if p.value("host").is_none() && p.value("hostaddr").is_none() {
        let first_port = port.split(',').next().unwrap_or_default();
        let first_port = if first_port.is_empty() {
            "5432"
        } else {
            first_port
        };
        let socket = SOCKET_DIRS
            .iter()
            .find(|d| env.exists(&Path::new(d).join(format!(".s.PGSQL.{first_port}"))));
        p.set("host", socket.copied().unwrap_or("localhost"));
    }
    if p.value("user").is_none() {
        let user = env
            .os_user()
            .ok_or("no user given and the operating system's user name is unknown")?;
        p.set("user", user);
    }
    if p.value("dbname").is_none() {
        let user = p.get("user").unwrap_or_default().to_owned();
        p.set("dbname", user);
    }
    if p.value("application_name").is_none() {
        p.set("application_name", "zklock");
    }
    let sslmode = p
        .take("sslmode")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "prefer".to_owned());
    let mut file = |key: &str| p.take(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    let (root_cert, cert, key) = (file("sslrootcert"), file("sslcert"), file("sslkey"));
    // libpq's defaults, where they exist: `~/.postgresql/root.crt`, `postgresql.crt` and
    // `postgresql.key`.
    let default = |name: &str| {
        env.home()
            .map(|h| h.join(".postgresql").join(name))
            .filter(|path| env.exists(path))
    };
    let cert = cert.or_else(|| default("postgresql.crt"));
    let key = key.or_else(|| cert.as_ref().and_then(|_| default("postgresql.key")));
    let ssl_files = SslFiles {
        root_cert: root_cert.or_else(|| default("root.crt")),
        cert,
        key,
    };
    let connect_timeout = match p.take("connect_timeout").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => {
            let secs: i64 = v
                .trim()
                .parse()
                .map_err(|_| format!("connect_timeout={v} is not a whole number of seconds"))?;
            // libpq's minimum is 2 s; 0 or less is no limit there, the builder's default here.
            u64::try_from(secs)
                .ok()
                .filter(|&s| s > 0)
                .map(|s| Duration::from_secs(s.max(2)))
        }
    };
    let passfile_given = p.take("passfile").filter(|v| !v.is_empty());
    let mut passfile = None;
    if p.value("password").is_none() {
        let file = passfile_given
            .map(PathBuf::from)
            .or_else(|| env.home().map(|h| h.join(".pgpass")));
        if let Some(file) = file {
            if let Some(pw) = env
                .passfile(&file)
                .and_then(|contents| password_for(&p, &contents))
            {
                p.set("password", pw);
                passfile = Some(file);
            }
        }
    }
    let config = tokio_postgres::Config::from_str(&p.to_key_values()).map_err(|e| {
        // tokio-postgres says "invalid configuration: …"; the cause says what.
        match std::error::Error::source(&e) {
            Some(cause) => cause.to_string(),
            None => e.to_string(),
        }
    })?;
    Ok(Settings {
        config,
        sslmode,
        ssl_files,
        connect_timeout,
        passfile,
    })
}

/// The service files, in the order libpq reads them: the user's (`PGSERVICEFILE`, else
/// `~/.pg_service.conf`), then the system's (`pg_service.conf` in `PGSYSCONFDIR`, else in
/// Debian's `/etc/postgresql-common`).
fn service_files(env: &dyn Env) -> Vec<PathBuf> {
    let user = env
        .var("PGSERVICEFILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".pg_service.conf")));
    let system = env
        .var("PGSYSCONFDIR")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/etc/postgresql-common".to_owned());
    user.into_iter()
        .chain([Path::new(&system).join("pg_service.conf")])
        .collect()
}

/// The keywords of the service `name`, from the first service file that defines it.
fn service(name: &str, env: &dyn Env) -> Result<Vec<(String, String)>, String> {
    let files = service_files(env);
    for file in &files {
        let contents = env
            .service_file(file)
            .map_err(|e| format!("service file {:?} cannot be read: {e}", file))?;
        if let Some(keywords) = contents
            .map(|c| service_section(&c, name, file))
            .transpose()?
            .flatten()
        {
            return Ok(keywords);
        }
    }
    let looked: Vec<String> = files.iter().map(|f| format!("{f:?}")).collect();
    Err(format!(
        "definition of service {name:?} not found (looked in {})",
        looked.join(" and ")
    ))
}

/// The keywords of the section `[name]` of a service file (`None` when it has none): one
/// `keyword=value` per line, `#` beginning a comment line.
fn service_section(
    contents: &str,
    name: &str,
    file: &Path,
) -> Result<Option<Vec<(String, String)>>, String> {
    let mut keywords: Option<Vec<(String, String)>> = None;
    for (number, line) in contents.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            if keywords.is_some() {
                break;
            }
            if section.strip_suffix(']') == Some(name) {
                keywords = Some(Vec::new());
            }
            continue;
        }
        let Some(found) = keywords.as_mut() else {
            continue;
        };
        let at = || format!("service file {:?}, line {}", file, number + 1);
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("syntax error in {}: no \"=\"", at()))?;
        let key = key.trim();
        if key == "service" {
            return Err(format!(
                "nested service specifications are not supported ({})",
                at()
            ));
        }
        if key.starts_with("ldap") {
            return Err(format!("LDAP lookups are not supported ({})", at()));
        }
        found.push((key.to_owned(), value.trim().to_owned()));
    }
    Ok(keywords)
}

/// The password of the first line of a password file that matches a host of `p` (in the order
/// of the hosts: tokio-postgres takes one password for every host), its port, `p`'s database
/// and user.
fn password_for(p: &Params, contents: &str) -> Option<String> {
    let user = p.value("user")?;
    let dbname = p.value("dbname")?;
    let hosts: Vec<&str> = p.get("host").unwrap_or_default().split(',').collect();
    let addrs: Vec<&str> = p.get("hostaddr").unwrap_or_default().split(',').collect();
    let ports: Vec<&str> = p.get("port").unwrap_or_default().split(',').collect();
    let count = hosts.len().max(addrs.len());
    (0..count).find_map(|i| {
        let host = hosts.get(i).copied().filter(|h| !h.is_empty());
        // libpq matches a host-less entry by its address.
        let host = host.or_else(|| addrs.get(i).copied()).unwrap_or_default();
        let host = if host.is_empty() || SOCKET_DIRS.contains(&host.trim_end_matches('/')) {
            "localhost"
        } else {
            host
        };
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .filter(|p| !p.is_empty())
            .unwrap_or("5432");
        lookup(contents, host, port, dbname, user)
    })
}

/// The password of the first line of a password file that matches: `host:port:db:user:pw`,
/// each of the first four a literal (`\` escapes the next character) or `*`; lines that start
/// with `#` are comments.
pub(crate) fn lookup(
    contents: &str,
    host: &str,
    port: &str,
    db: &str,
    user: &str,
) -> Option<String> {
    contents.lines().find_map(|line| {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let mut rest = line;
        for want in [host, port, db, user] {
            rest = field_matches(rest, want)?;
        }
        // The password runs to an unescaped `:` or the end, its backslashes removed.
        let mut pw = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                ':' => break,
                '\\' => match chars.next() {
                    Some(next) => pw.push(next),
                    None => pw.push('\\'),
                },
                c => pw.push(c),
            }
        }
        Some(pw)
    })
}

/// The rest of `line` after its first field and `:`, when that field matches `want`.
fn field_matches<'a>(line: &'a str, want: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut want = want.chars();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        let c = match c {
            '\\' => chars.next()?.1,
            ':' => {
                return want.next().is_none().then(|| &line[i + 1..]);
            }
            c => c,
        };
        if want.next() != Some(c) {
            return None;
        }
    }
    None
}

/// The keywords `s` gives: a `postgres://` (`postgresql://`) URL, else a key-value string.
pub(crate) fn parse(s: &str) -> Result<Params, String> {
    let t = s.trim();
    for prefix in ["postgresql://", "postgres://"] {
        if let Some(rest) = t.strip_prefix(prefix) {
            return parse_url(rest);
        }
    }
    parse_key_values(s)
}

/// Why a URL with a raw `@` outside its credentials is refused (quoting none of it).
const RAW_AT: &str =
    "a raw \"@\" after the credentials: a user name or password with \"@\", \"/\" \
     or \":\" must be percent-encoded in a URL (%40, %2F, %3A), or given as PGPASSWORD or in the \
     password file";

/// libpq's URL: `[user[:password]@][host[:port][,host[:port]…]][/dbname][?key=value&…]`, each
/// part percent-decoded.
fn parse_url(s: &str) -> Result<Params, String> {
    let mut p = Params::default();
    let mut rest = s;
    // Credentials: up to an `@` before the first `/`.
    let end = rest.find(['@', '/']).unwrap_or(rest.len());
    if rest[end..].starts_with('@') {
        let creds = &rest[..end];
        let (user, password) = match creds.split_once(':') {
            Some((u, pw)) => (u, Some(pw)),
            None => (creds, None),
        };
        if !user.is_empty() {
            p.set("user", decode(user)?);
        }
        if let Some(pw) = password {
            // Not quoted: the text is a password.
            let pw = decode(pw).map_err(|_| {
                "the password is not valid percent-encoding (a `%` must start `%XX`: write \
                 `%25` for `%` itself)"
                    .to_owned()
            })?;
            p.set("password", pw);
        }
        rest = &rest[end + 1..];
    }
    // A raw `@` before the parameters is a user name or password that holds `@`, `/` or `:`
    // unencoded: read as hosts or a database, it would connect somewhere else with a part of
    // the password shown as a host name.
    if rest.split('?').next().is_some_and(|r| r.contains('@')) {
        return Err(RAW_AT.to_owned());
    }
    // Hosts and ports, up to `/` or `?`.
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (hostspec, tail) = rest.split_at(end);
    let (mut hosts, mut ports) = (Vec::new(), Vec::new());
    if !hostspec.is_empty() {
        for one in hostspec.split(',') {
            let (host, port) = if let Some(v6) = one.strip_prefix('[') {
                let (h, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("missing \"]\" in the IPv6 host {one:?}"))?;
                match after {
                    "" => (h, ""),
                    _ => (
                        h,
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| format!("unexpected {after:?} after the IPv6 host"))?,
                    ),
                }
            } else {
                one.split_once(':').unwrap_or((one, ""))
            };
            hosts.push(decode(host)?);
            ports.push(decode(port)?);
        }
    }
    let joined = hosts.join(",");
    if !joined.is_empty() {
        p.set("host", joined);
    }
    let joined = ports.join(",");
    if !joined.is_empty() {
        p.set("port", joined);
    }
    rest = tail;
    if let Some(path) = rest.strip_prefix('/') {
        let end = path.find('?').unwrap_or(path.len());
        if end > 0 {
            p.set("dbname", decode(&path[..end])?);
        }
        rest = &path[end..];
    }
    if let Some(query) = rest.strip_prefix('?') {
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("missing \"=\" in the URL parameter {pair:?}"))?;
            let k = decode(k)?;
            let v = if k == "password" {
                decode(v).map_err(|_| {
                    "the password parameter is not valid percent-encoding".to_owned()
                })?
            } else {
                decode(v)?
            };
            p.set(&k, v);
        }
    }
    Ok(p)
}

/// `%XX` decoded.
fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .filter(|&b| b != 0)
                .ok_or_else(|| format!("invalid percent-encoded token in {s:?}"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

/// libpq's key-value string: `key = value` pairs separated by white space; a value in single
/// quotes may hold white space; a backslash escapes the next character, quoted or not.
fn parse_key_values(s: &str) -> Result<Params, String> {
    let mut p = Params::default();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|&c| !c.is_whitespace() && c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            return Ok(p);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "missing \"=\" after {key:?} (a connection string is a postgres:// URL or \
                 key=value pairs)"
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value of {key:?}")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        p.set(&key, value);
    }
}

/// `s` with its password hidden: a URL's between `user:` and `@`, a key-value string's
/// `password` value (and, when the string does not parse, all from the word `password` on).
pub(crate) fn hide_password(s: &str) -> String {
    let t = s.trim();
    if t.starts_with("postgres://") || t.starts_with("postgresql://") {
        return hide_query_password(&hide_url_password(t));
    }
    match parse_key_values(s) {
        Ok(p) if p.get("password").is_some() => {
            let mut shown = p;
            shown.set("password", "***");
            shown
                .to_key_values()
                .replace("password='***'", "password=***")
        }
        Ok(_) => s.to_owned(),
        Err(_) => match s.find("password") {
            Some(at) => format!("{}password=***", &s[..at]),
            None => s.to_owned(),
        },
    }
}

/// A URL's `user:PASSWORD@` hidden. A malformed password may hold `@`, `/`, `:` or `?`
/// unencoded, so the credentials are taken to end at the *last* `@` followed by what can be a
/// host list (up to a `/`, `?` or the end), and to start after the user name (up to the first
/// `:`, which holds no `/` or `?`: else the text is a host and path, and has no credentials).
/// This hides more than the password when a parameter's value holds an `@`, never less.
fn hide_url_password(url: &str) -> String {
    match credentials(url) {
        Some((user_end, at)) => format!("{}:***{}", &url[..user_end], &url[at..]),
        None => url.to_owned(),
    }
}

/// Where a URL's credentials are: the end of the user name (its `:`) and the `@` that ends the
/// password, when it has a password (see [`hide_url_password`]).
fn credentials(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let after = &url[start..];
    let ats: Vec<usize> = after.match_indices('@').map(|(i, _)| i).collect();
    let host_like = |i: usize| {
        let tail = &after[i + 1..];
        let host = &tail[..tail.find(['/', '?']).unwrap_or(tail.len())];
        host.chars()
            .all(|c| c.is_alphanumeric() || ".-_:,[]%".contains(c))
    };
    // With no `@` before a host list, the last `@` of all.
    let at = ats
        .iter()
        .rev()
        .find(|&&i| host_like(i))
        .or(ats.last())
        .copied()?;
    let colon = after[..at].find(':')?;
    let user = &after[..colon];
    if user.contains(['/', '?']) {
        return None;
    }
    Some((start + colon, start + at))
}

/// `why`, an error about the connection string `input`, with every quoted text (`"…"`, as
/// `{:?}` writes it) longer than one character hidden when `input` holds a password: a
/// malformed string's parts are quoted as the parser saw them, and a password's pieces may be
/// among them.
pub(crate) fn hide_quoted(why: &str, input: &str) -> String {
    let hidden = hide_password(input);
    if hidden == input || hidden == input.trim() {
        return why.to_owned();
    }
    let mut out = String::with_capacity(why.len());
    let mut chars = why.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' {
            continue;
        }
        let mut quoted = String::new();
        let mut closed = false;
        while let Some(q) = chars.next() {
            match q {
                '\\' => {
                    quoted.push(q);
                    quoted.extend(chars.next());
                }
                '"' => {
                    closed = true;
                    break;
                }
                _ => quoted.push(q),
            }
        }
        if quoted.chars().count() > 1 || !closed {
            out.push_str("***");
        } else {
            out.push_str(&quoted);
        }
        if closed {
            out.push('"');
        }
    }
    out
}

/// A URL's `password=` parameter hidden.
fn hide_query_password(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An environment of the test's own.
    #[derive(Default)]
    struct Fake {
        vars: HashMap<&'static str, &'static str>,
        home: Option<&'static str>,
        sockets: Vec<&'static str>,
        /// A password file's path and contents (`None`: ignored, as a file others can read).
        files: HashMap<&'static str, Option<&'static str>>,
        /// A service file's path and contents (`None`: unreadable).
        services: HashMap<&'static str, Option<&'static str>>,
    }

    impl Env for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).map(|v| (*v).to_owned())
        }
        fn home(&self) -> Option<PathBuf> {
            self.home.map(PathBuf::from)
        }
        fn os_user(&self) -> Option<String> {
            Some("osuser".to_owned())
        }
        fn exists(&self, path: &Path) -> bool {
            self.sockets.iter().any(|s| Path::new(s) == path)
        }
        fn service_file(&self, path: &Path) -> std::io::Result<Option<String>> {
            match self.services.get(path.to_str().unwrap()) {
                Some(Some(text)) => Ok(Some((*text).to_owned())),
                Some(None) => Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
                None => Ok(None),
            }
        }
        fn passfile(&self, path: &Path) -> Option<String> {
            self.files
                .get(path.to_str()?)
                .copied()
                .flatten()
                .map(str::to_owned)
        }
    }

    fn env(vars: &[(&'static str, &'static str)]) -> Fake {
        Fake {
            vars: vars.iter().copied().collect(),
            ..Fake::default()
        }
    }

    fn pairs(p: &Params) -> Vec<(&str, &str)> {
        p.0.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    fn hosts(c: &tokio_postgres::Config) -> Vec<String> {
        c.get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect()
    }

    #[test]
    fn urls_give_what_they_name_and_nothing_more() {
        assert_eq!(pairs(&parse("postgres://").unwrap()), []);
        assert_eq!(pairs(&parse("postgresql:///").unwrap()), []);
        assert_eq!(
            pairs(
                &parse(
                    "postgres://app:p%40ss:w@db.internal:6432/my%20db\
                     ?sslmode=require&application_name=x"
                )
                .unwrap()
            ),
            [
                ("user", "app"),
                ("password", "p@ss:w"),
                ("host", "db.internal"),
                ("port", "6432"),
                ("dbname", "my db"),
                ("sslmode", "require"),
                ("application_name", "x")
            ]
        );
        // No port: none given (an environment's may apply), where tokio-postgres sets 5432.
        assert_eq!(
            pairs(&parse("postgres://a,[::1]:5433/d").unwrap()),
            [("host", "a,::1"), ("port", ",5433"), ("dbname", "d")]
        );
        // A query parameter replaces what the URL's body gave; a Unix socket as `host=`.
        assert_eq!(
            pairs(&parse("postgres://u@h/d?host=%2Fvar%2Frun%2Fpostgresql&user=v").unwrap()),
            [
                ("user", "v"),
                ("host", "/var/run/postgresql"),
                ("dbname", "d")
            ]
        );
        assert!(parse("postgres://h/d?x").is_err());
        assert!(parse("postgres://h/%zz").is_err());
        assert!(parse("postgres://[::1/d").is_err());
    }

    #[test]
    fn key_value_strings_follow_libpq_quoting() {
        let p = parse(concat!(
            r"host=db  port = 5433 user=app password='it\'s a \\ secret' ",
            r"dbname=x\ y options='-c a=b'"
        ))
        .unwrap();
        assert_eq!(
            pairs(&p),
            [
                ("host", "db"),
                ("port", "5433"),
                ("user", "app"),
                ("password", r"it's a \ secret"),
                ("dbname", "x y"),
                ("options", "-c a=b")
            ]
        );
        assert_eq!(pairs(&parse("").unwrap()), []);
        assert_eq!(pairs(&parse("  ").unwrap()), []);
        // The last of a keyword given twice; an empty value.
        assert_eq!(
            pairs(&parse("user=a user=b password=''").unwrap()),
            [("user", "b"), ("password", "")]
        );
        assert!(parse("host").unwrap_err().contains("missing \"=\""));
        assert!(parse("redis://h:1").unwrap_err().contains("postgres://"));
        assert!(parse("password='open")
            .unwrap_err()
            .contains("unterminated"));
        // Round trip through tokio-postgres's parser.
        let back = tokio_postgres::Config::from_str(&p.to_key_values()).unwrap();
        assert_eq!(back.get_password(), Some(&br"it's a \ secret"[..]));
        assert_eq!(back.get_dbname(), Some("x y"));
    }

    #[test]
    fn tls_files_come_from_the_string_or_the_environment() {
        let e = env(&[
            ("PGSSLROOTCERT", "/env/root.crt"),
            ("PGSSLCERT", "/env/client.crt"),
            ("PGSSLKEY", ""),
        ]);
        let s = resolve(
            "postgres://u@h/d?sslrootcert=/etc/ca.pem&sslmode=verify-full",
            &e,
        )
        .unwrap();
        assert_eq!(
            s.ssl_files,
            SslFiles {
                root_cert: Some(PathBuf::from("/etc/ca.pem")),
                cert: Some(PathBuf::from("/env/client.crt")),
                key: None,
            }
        );
        let s = resolve("host=h user=u sslrootcert=system", &env(&[])).unwrap();
        assert_eq!(s.ssl_files.root_cert, Some(PathBuf::from("system")));
        assert_eq!(
            resolve("host=h user=u", &env(&[])).unwrap().ssl_files,
            SslFiles::default()
        );
    }

    #[test]
    fn tls_files_default_to_those_in_the_home_postgresql_directory() {
        let home = |sockets: Vec<&'static str>, vars: &[(&'static str, &'static str)]| Fake {
            home: Some("/home/u"),
            sockets,
            ..env(vars)
        };
        let all = vec![
            "/home/u/.postgresql/root.crt",
            "/home/u/.postgresql/postgresql.crt",
            "/home/u/.postgresql/postgresql.key",
        ];
        let s = resolve("host=h user=u", &home(all.clone(), &[])).unwrap();
        assert_eq!(
            s.ssl_files,
            SslFiles {
                root_cert: Some(PathBuf::from("/home/u/.postgresql/root.crt")),
                cert: Some(PathBuf::from("/home/u/.postgresql/postgresql.crt")),
                key: Some(PathBuf::from("/home/u/.postgresql/postgresql.key")),
            }
        );
        // What the string or the environment names goes first.
        let s = resolve(
            "host=h user=u sslrootcert=/ca.pem",
            &home(
                all.clone(),
                &[("PGSSLCERT", "/c.crt"), ("PGSSLKEY", "/c.key")],
            ),
        )
        .unwrap();
        assert_eq!(
            s.ssl_files,
            SslFiles {
                root_cert: Some(PathBuf::from("/ca.pem")),
                cert: Some(PathBuf::from("/c.crt")),
                key: Some(PathBuf::from("/c.key")),
            }
        );
        // Files that do not exist are not named; a default key goes only with a certificate.
        let s = resolve(
            "host=h user=u",
            &home(vec!["/home/u/.postgresql/postgresql.key"], &[]),
        )
        .unwrap();
        assert_eq!(s.ssl_files, SslFiles::default());
    }

    #[test]
    fn a_service_names_a_section_of_the_service_file() {
        let user_file = "# the user's\n\
                         [app]\n\
                         host=userhost\n\
                         port = 6001\n\
                         user=serviceuser\n\
                         user=second\n\
                         \n\
                         [other]\n\
                         host=otherhost\n";
        let system_file = "[app]\nhost=systemhost\n[sys]\nhost=syshost\ndbname=sysdb\n";
        let fake = |vars: &[(&'static str, &'static str)]| Fake {
            home: Some("/home/u"),
            services: [
                ("/home/u/.pg_service.conf", Some(user_file)),
                ("/etc/postgresql-common/pg_service.conf", Some(system_file)),
                ("/elsewhere/services", Some("[app]\nhost=elsewhere\n")),
                ("/sysconf/pg_service.conf", Some("[sys]\nhost=confhost\n")),
                ("/unreadable", None),
            ]
            .into(),
            ..env(vars)
        };
        let e = fake(&[("PGHOST", "envhost"), ("PGDATABASE", "envdb")]);
        // The service's keywords go after the string's and before the environment's; the
        // first of a keyword given twice in the section counts (libpq).
        let s = resolve("service=app port=7", &e).unwrap();
        assert_eq!(hosts(&s.config), ["userhost"]);
        assert_eq!(s.config.get_ports(), [7]);
        assert_eq!(s.config.get_user(), Some("serviceuser"));
        assert_eq!(s.config.get_dbname(), Some("envdb"));
        let s = resolve("postgres://h?service=app", &e).unwrap();
        assert_eq!(hosts(&s.config), ["h"]);
        assert_eq!(s.config.get_ports(), [6001]);
        // PGSERVICE when the string names none; the system's file when the user's lacks it.
        let s = resolve("", &fake(&[("PGSERVICE", "sys")])).unwrap();
        assert_eq!(hosts(&s.config), ["syshost"]);
        assert_eq!(s.config.get_dbname(), Some("sysdb"));
        // PGSERVICEFILE and PGSYSCONFDIR move the files.
        let moved = fake(&[
            ("PGSERVICEFILE", "/elsewhere/services"),
            ("PGSYSCONFDIR", "/sysconf"),
        ]);
        let s = resolve("service=app", &moved).unwrap();
        assert_eq!(hosts(&s.config), ["elsewhere"]);
        let s = resolve("service=sys", &moved).unwrap();
        assert_eq!(hosts(&s.config), ["confhost"]);
        // Refusals say why, with the file and line where there is one.
        let missing = resolve("service=nowhere", &e).unwrap_err();
        assert!(
            missing.contains("\"nowhere\" not found") && missing.contains(".pg_service.conf"),
            "{missing}"
        );
        let bad = Fake {
            home: Some("/home/u"),
            services: [(
                "/home/u/.pg_service.conf",
                Some("[a]\nhost=h\njunk\n[b]\nservice=a\n"),
            )]
            .into(),
            ..Fake::default()
        };
        let junk = resolve("service=a", &bad).unwrap_err();
        assert!(
            junk.contains("syntax error") && junk.contains("line 3"),
            "{junk}"
        );
        let nested = resolve("service=b", &bad).unwrap_err();
        assert!(nested.contains("nested service"), "{nested}");
        let unreadable = resolve("service=a", &fake(&[("PGSERVICEFILE", "/unreadable")]));
        assert!(unreadable.unwrap_err().contains("/unreadable"));
    }

    #[test]
    fn the_string_goes_before_the_environment_which_goes_before_the_defaults() {
        let e = env(&[
            ("PGHOST", "envhost"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpw"),
            ("PGDATABASE", "envdb"),
            ("PGAPPNAME", "envapp"),
            ("PGSSLMODE", "verify-full"),
            ("PGCONNECT_TIMEOUT", "1"),
            ("PGOPTIONS", "-c x=y"),
        ]);
        let s = resolve("postgres://", &e).unwrap();
        assert_eq!(hosts(&s.config), ["envhost"]);
        assert_eq!(s.config.get_ports(), [6000]);
        assert_eq!(s.config.get_user(), Some("envuser"));
        assert_eq!(s.config.get_password(), Some(&b"envpw"[..]));
        assert_eq!(s.config.get_dbname(), Some("envdb"));
        assert_eq!(s.config.get_application_name(), Some("envapp"));
        assert_eq!(s.config.get_options(), Some("-c x=y"));
        assert_eq!(s.sslmode, "verify-full");
        // libpq's minimum of 2 s.
        assert_eq!(s.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(s.passfile, None);
        // The string's values win, in either form; what it leaves out still comes from the
        // environment.
        for given in [
            "postgres://u:pw@h:7/d?sslmode=disable&application_name=a",
            "host=h port=7 user=u password=pw dbname=d sslmode=disable application_name=a",
        ] {
            let s = resolve(given, &e).unwrap();
            assert_eq!(hosts(&s.config), ["h"]);
            assert_eq!(s.config.get_ports(), [7]);
            assert_eq!(s.config.get_user(), Some("u"));
            assert_eq!(s.config.get_password(), Some(&b"pw"[..]));
            assert_eq!(s.config.get_dbname(), Some("d"));
            assert_eq!(s.config.get_application_name(), Some("a"));
            assert_eq!(s.config.get_options(), Some("-c x=y"));
            assert_eq!(s.sslmode, "disable");
        }
        // A URL host without a port takes PGPORT (tokio-postgres alone would say 5432).
        let s = resolve("postgres://h/d", &e).unwrap();
        assert_eq!(s.config.get_ports(), [6000]);
        // Nothing anywhere: the operating system's user, a database of its name, zklock's
        // application name, port 5432, TCP to localhost when no socket is found.
        let s = resolve("", &Fake::default()).unwrap();
        assert_eq!(hosts(&s.config), ["localhost"]);
        assert_eq!(s.config.get_ports(), [5432]);
        assert_eq!(s.config.get_user(), Some("osuser"));
        assert_eq!(s.config.get_dbname(), Some("osuser"));
        assert_eq!(s.config.get_application_name(), Some("zklock"));
        assert_eq!(s.config.get_password(), None);
        assert_eq!(s.sslmode, "prefer");
        assert_eq!(s.connect_timeout, None);
        // ... or the Unix socket directory where the server's socket is.
        let sockets = Fake {
            sockets: vec!["/tmp/.s.PGSQL.5433"],
            ..env(&[("PGPORT", "5433")])
        };
        let s = resolve("postgres://", &sockets).unwrap();
        assert_eq!(hosts(&s.config), ["/tmp"]);
        // An empty value given is the default, and keeps the environment's away (libpq).
        let s = resolve("host='' user=u", &e).unwrap();
        assert_eq!(hosts(&s.config), ["localhost"]);
        // A hostaddr alone names the server.
        let s = resolve("hostaddr=127.0.0.1 user=u", &Fake::default()).unwrap();
        assert!(s.config.get_hosts().is_empty());
        assert_eq!(s.config.get_hostaddrs().len(), 1);
        // Refusals name the keyword.
        assert!(resolve("gssencmode=x", &e)
            .unwrap_err()
            .contains("gssencmode"));
        assert!(resolve("port=x", &e).unwrap_err().contains("port"));
        assert!(resolve("connect_timeout=soon", &e)
            .unwrap_err()
            .contains("connect_timeout"));
        let zero = resolve("connect_timeout=0", &e).unwrap();
        assert_eq!(zero.connect_timeout, None);
    }

    #[test]
    fn the_password_file_is_read_only_when_no_password_is_given() {
        let file = "h:5432:d:u:from-home\n";
        let home = |vars: &[(&'static str, &'static str)]| Fake {
            home: Some("/home/u"),
            files: [
                ("/home/u/.pgpass", Some(file)),
                ("/elsewhere", Some("*:*:*:*:from-elsewhere\n")),
                ("/open", None),
            ]
            .into_iter()
            .collect(),
            ..env(vars)
        };
        let pw = |s: &Settings| {
            s.config
                .get_password()
                .map(|p| String::from_utf8(p.to_vec()).unwrap())
        };
        let s = resolve("postgres://u@h/d", &home(&[])).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("from-home"));
        assert_eq!(s.passfile.as_deref(), Some(Path::new("/home/u/.pgpass")));
        // PGPASSFILE, then passfile= before it.
        let s = resolve("postgres://u@h/d", &home(&[("PGPASSFILE", "/elsewhere")])).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("from-elsewhere"));
        let s = resolve(
            "host=h user=u dbname=d passfile=/home/u/.pgpass",
            &home(&[("PGPASSFILE", "/elsewhere")]),
        )
        .unwrap();
        assert_eq!(pw(&s).as_deref(), Some("from-home"));
        // A password given, in the string or PGPASSWORD, goes first.
        let s = resolve("postgres://u:given@h/d", &home(&[])).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("given"));
        assert_eq!(s.passfile, None);
        let s = resolve("postgres://u@h/d", &home(&[("PGPASSWORD", "env")])).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("env"));
        // No match, or a file ignored: no password.
        assert_eq!(pw(&resolve("postgres://v@h/d", &home(&[])).unwrap()), None);
        let open = resolve("postgres://u@h/d", &home(&[("PGPASSFILE", "/open")])).unwrap();
        assert_eq!(pw(&open), None);
        // The database defaults to the user's name before the file is matched.
        let f = Fake {
            home: Some("/h"),
            files: [("/h/.pgpass", Some("h:5432:u:u:dbisuser\n"))]
                .into_iter()
                .collect(),
            ..Fake::default()
        };
        let s = resolve("host=h user=u", &f).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("dbisuser"));
        // Several hosts: the first host with a matching line.
        let f = Fake {
            home: Some("/h"),
            files: [("/h/.pgpass", Some("b:5433:d:u:for-b\n"))]
                .into_iter()
                .collect(),
            ..Fake::default()
        };
        let s = resolve("postgres://u@a:5432,b:5433/d", &f).unwrap();
        assert_eq!(pw(&s).as_deref(), Some("for-b"));
    }

    #[test]
    fn password_file_lines_match_as_libpq_matches_them() {
        let file = "# a comment: *:*:*:*:no\n\
                    \n\
                    db\\:1:5432:app:u:escaped-host\n\
                    db:*:app:u:pw\\:with\\\\colon:ignored\r\n\
                    *:*:*:u:any\n\
                    *:*:*:*:last\n";
        assert_eq!(
            lookup(file, "db:1", "5432", "app", "u").as_deref(),
            Some("escaped-host")
        );
        assert_eq!(
            lookup(file, "db", "6000", "app", "u").as_deref(),
            Some(r"pw:with\colon")
        );
        // First match wins.
        assert_eq!(lookup(file, "other", "1", "x", "u").as_deref(), Some("any"));
        assert_eq!(
            lookup(file, "other", "1", "x", "v").as_deref(),
            Some("last")
        );
        // A field must match whole; `*` only alone.
        assert_eq!(lookup("db:5432:app:u:x\n", "d", "5432", "app", "u"), None);
        assert_eq!(lookup("db:5432:app:u:x\n", "dbx", "5432", "app", "u"), None);
        assert_eq!(lookup("d*:5432:app:u:x\n", "db", "5432", "app", "u"), None);
        // Too few fields.
        assert_eq!(lookup("db:5432:app\n", "db", "5432", "app", "u"), None);
        // `localhost` matches a Unix socket in a default directory and a host-less string.
        let p = |s: &str| {
            let mut p = parse(s).unwrap();
            p.set("port", p.value("port").unwrap_or("5432").to_owned());
            p
        };
        let lh = "localhost:5432:d:u:local\n";
        assert_eq!(
            password_for(&p("host=/var/run/postgresql user=u dbname=d"), lh).as_deref(),
            Some("local")
        );
        assert_eq!(
            password_for(&p("host=/tmp/ user=u dbname=d"), lh).as_deref(),
            Some("local")
        );
        assert_eq!(password_for(&p("host=/srv/pg user=u dbname=d"), lh), None);
        assert_eq!(
            password_for(
                &p("host=/srv/pg user=u dbname=d"),
                "/srv/pg:5432:d:u:path\n"
            )
            .as_deref(),
            Some("path")
        );
        // A host-less entry is matched by its address.
        assert_eq!(
            password_for(
                &p("hostaddr=10.0.0.1 user=u dbname=d"),
                "10.0.0.1:5432:d:u:addr\n"
            )
            .as_deref(),
            Some("addr")
        );
    }

    #[test]
    fn libpq_ignores_a_password_file_others_can_open() {
        assert_eq!(ignored(true, 0o100600), None);
        assert_eq!(ignored(true, 0o100400), None);
        assert!(ignored(true, 0o100640).unwrap().contains("group or world"));
        assert!(ignored(true, 0o100604).unwrap().contains("group or world"));
        assert!(ignored(true, 0o100610).is_some());
        assert!(ignored(false, 0o40700).unwrap().contains("plain file"));
    }

    #[test]
    fn passwords_are_hidden_in_either_form() {
        assert_eq!(
            hide_password("postgres://u:pw@h:1/d"),
            "postgres://u:***@h:1/d"
        );
        assert_eq!(hide_password("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(
            hide_password("postgres://u@h/d?password=pw&x=1"),
            "postgres://u@h/d?password=***&x=1"
        );
        // An `@` in the query is not the credentials'.
        assert_eq!(
            hide_password("postgres://h/d?options=a:b@c"),
            "postgres://h/d?options=a:b@c"
        );
        let kv = hide_password("host=h password='it\\'s' user=u");
        assert!(!kv.contains("it") && kv.contains("password=***"), "{kv}");
        let broken = hide_password("host=h password='open");
        assert_eq!(broken, "host=h password=***");
    }

    /// Raw `@`, `:`, `/` and `?` in a password: no part of it is shown, however the URL reads.
    #[test]
    fn malformed_passwords_are_hidden_whole() {
        let cases = [
            (
                "postgres://leak:p/w%9@x@k:p/w@host/db",
                "postgres://leak:***@host/db",
            ),
            ("postgres://u:a@b@host:5/d", "postgres://u:***@host:5/d"),
            ("postgres://u:a?b@c@h/d?x=1", "postgres://u:***@h/d?x=1"),
            ("postgres://u:p/w@h", "postgres://u:***@h"),
            ("postgres://a@b:pw@h", "postgres://a@b:***@h"),
            ("postgres://u:pw@h st/d", "postgres://u:***@h st/d"),
            ("postgresql://u:a:b@h", "postgresql://u:***@h"),
        ];
        for (url, shown) in cases {
            assert_eq!(hide_password(url), shown, "{url}");
        }
        // A parameter's `@` after a path is not taken for credentials.
        assert_eq!(
            hide_password("postgres://h/d?options=a:b@c"),
            "postgres://h/d?options=a:b@c"
        );
    }

    #[test]
    fn a_raw_at_after_the_credentials_is_refused_and_nothing_is_quoted() {
        for url in [
            "postgres://leak:p/w%9@x@k:p/w@host/db",
            "postgres://u:a@b@host/db",
            "postgres://u:p/w@host/db",
        ] {
            let why = parse(url).map(|_| ()).unwrap_err();
            assert_eq!(why, RAW_AT, "{url}");
        }
        let why = parse("postgres://u:zq%9xv@h/d").map(|_| ()).unwrap_err();
        assert!(!why.contains("zq") && !why.contains("xv"), "{why}");
        let why = parse("postgres://h/d?password=zq%9xv")
            .map(|_| ())
            .unwrap_err();
        assert!(!why.contains("zq") && !why.contains("xv"), "{why}");
        // A parameter may hold an `@`.
        assert!(parse("postgres://u:pw@h/d?options=a@b").is_ok());
    }

    #[test]
    fn quoted_parts_of_an_error_are_hidden_when_the_string_has_a_password() {
        // The password's second word is read as a keyword without `=`.
        let input = "host=h password=it zq";
        let why = parse(input).map(|_| ()).unwrap_err();
        assert!(why.contains("\"zq\""), "{why}");
        let shown = hide_quoted(&why, input);
        assert!(
            !shown.contains("zq") && shown.contains("\"***\""),
            "{shown}"
        );
        let long = hide_quoted("bad \"secret\" and \"=\"", "host=h password=secret");
        assert_eq!(long, "bad \"***\" and \"=\"");
        assert_eq!(hide_quoted("bad \"x y\"", "host=h"), "bad \"x y\"");
    }
}
