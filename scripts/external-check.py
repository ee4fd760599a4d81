#!/usr/bin/env python3
"""Fails when a test, bench, example or the library runs an external command or imports a Python
module that no set-up script installs.

It reads every `Command::new("…")` literal and every `import` in an inline `python3 -c` string
in the Rust sources (src/, tests/, benches/, examples/), and every import of the Python files
under benches/, tests/ and scripts/, and looks each up in `KNOWN` below: the Debian package or
source that provides it and the set-up script that installs it (which must name the package). Prints that table with `-v`.

    scripts/external-check.py [-v] [ROOT]   # ROOT defaults to the repository
"""
import os
import re
import sys

# Commands and modules Debian always has (priority "required") or the toolchain brings.
ESSENTIAL = {"sh", "id", "cargo", "rustc"}

# name -> (what provides it, the script that installs it)
KNOWN = {
    # Commands.
    "ps": ("procps", "ensure-base.sh"),
    "pgrep": ("procps", "ensure-base.sh"),
    "kill": ("procps", "ensure-base.sh"),
    "flock": ("util-linux", "ensure-base.sh"),
    "openssl": ("openssl", "ensure-base.sh"),
    "/usr/bin/python3": ("python3", "ensure-base.sh"),
    "java": ("default-jre-headless", "ensure-zookeeper.sh"),
    "javac": ("default-jdk-headless", "ensure-zookeeper.sh --interop"),
    "psql": ("postgresql-client", "ensure-postgres.sh"),
    "pgbouncer": ("pgbouncer", "ensure-postgres.sh"),
    "mariadb": ("mariadb-client", "ensure-mariadb.sh"),
    # Python modules beyond the standard library.
    "kazoo": ("python3-kazoo", "ensure-zookeeper.sh --interop"),
    "redis": ("python3-redis", "ensure-redis.sh"),
    "redis_lock": ("python-redis-lock from PyPI, into a virtualenv (python3-venv)", "ensure-redis.sh"),
    "psycopg2": ("python3-psycopg2", "ensure-postgres.sh"),
    "pymysql": ("python3-pymysql", "ensure-mariadb.sh"),
}

COMMAND = re.compile(r'Command::new\("([^"]+)"\)')
INLINE = re.compile(r'"-c",\s*"((?:import|from) [^"]*)"')
PY_IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def modules(statement):
    """Top-level module names of one `import a, b` or `from a import …` statement."""
    if statement.startswith("from "):
        return [statement.split()[1].split(".")[0]]
    names = statement[len("import "):].split(";")[0]
    return [n.strip().split(".")[0].split()[0] for n in names.split(",") if n.strip()]


def found(root):
    """Each external name used, with the files that use it."""
    uses = {}
    for top in ("src", "tests", "benches", "examples", "scripts"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                if name.endswith(".rs"):
                    text = open(path, encoding="utf-8").read()
                    names = COMMAND.findall(text)
                    for statement in INLINE.findall(text):
                        names += modules(statement)
                elif name.endswith(".py") and top != "src" and top != "examples":
                    text = open(path, encoding="utf-8").read()
                    names = PY_IMPORT.findall(text)
                else:
                    continue
                for n in names:
                    uses.setdefault(n, set()).add(rel)
    return uses


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    stdlib = getattr(sys, "stdlib_module_names", set())
    unknown = []
    rows = []
    for name, files in sorted(found(root).items()):
        if name in ESSENTIAL or name in stdlib:
            continue
        if name not in KNOWN:
            unknown.append((name, files))
            continue
        package, script = KNOWN[name]
        rows.append((name, package, script))
        installer = os.path.join(root, "scripts", script.split()[0])
        word = package.split()[0]
        if not os.path.exists(installer) or word not in open(installer, encoding="utf-8").read():
            unknown.append((name, files))
    if "-v" in sys.argv:
        for row in rows:
            print("| `%s` | %s | `scripts/%s` |" % row)
    for name, files in unknown:
        print("%s is used by %s but no set-up script installs it: add it to a scripts/ensure-*.sh "
              "and to KNOWN in %s" % (name, ", ".join(sorted(files)), os.path.basename(__file__)),
              file=sys.stderr)
    sys.exit(1 if unknown else 0)


if __name__ == "__main__":
    main()
