#!/usr/bin/env bash
# Makes sure Debian's MariaDB server and client are present (the MySQL backend's tests start
# their own servers with mariadb-install-db and mariadbd, and talk to them as root with the
# `mariadb` client over their socket), installing the package with apt-get if not; also
# Debian's galera-4 and rsync, for the Galera clusters of tests/mysql_galera.rs and
# tests/chaos_mysql.rs, and python3-pymysql, the MySQL bench's peer. Oracle's MySQL is not in
# Debian's archive: the tests run on MariaDB only. Nothing is installed when
# MARIADB_BINDIR names a directory with your own.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

need=()
if [ -z "${MARIADB_BINDIR:-}" ] && ! [ -x /usr/sbin/mariadbd ]; then
  need+=(mariadb-server)
fi
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
# TestingMariaDb::start_galera: the Galera provider, and rsync for its state transfers.
if [ -z "${GALERA_PROVIDER:-}" ] && ! [ -e /usr/lib/galera/libgalera_smm.so ]; then
  need+=(galera-4)
fi
command -v rsync >/dev/null 2>&1 || need+=(rsync)
# The MySQL bench's peer row: PyMySQL's plain GET_LOCK (benches/python/pymysql_bench.py).
/usr/bin/python3 -c 'import pymysql' >/dev/null 2>&1 || need+=(python3-pymysql)
[ ${#need[@]} -eq 0 ] && exit 0

# The package's own server is not wanted running (the tests start theirs): no service start
# where there is no init system; where there is one, it is stopped again.
apt_install "${need[@]}"
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet mariadb 2>/dev/null; then
  $apt_sudo systemctl stop mariadb || true
fi
