#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL server, psql, PgBouncer and psycopg2 are present (the PostgreSQL
# backend's tests start their own servers with initdb and postgres, talk to them with psql, and
# put PgBouncer in front of them), installing the packages with apt-get if not. The server is
# not installed when PG_BINDIR names one of your own.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

need=()
if [ -z "${PG_BINDIR:-}" ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  need+=(postgresql)
fi
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
# The pooler tests put PgBouncer between zklock and the server.
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
# The benchmark's peer: psycopg2 taking the same advisory lock.
/usr/bin/python3 -c 'import psycopg2' >/dev/null 2>&1 || need+=(python3-psycopg2)
[ ${#need[@]} -eq 0 ] && exit 0

# No cluster of the package's own (the tests create theirs).
$apt_sudo mkdir -p /etc/postgresql-common
grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
  echo 'create_main_cluster = false' | $apt_sudo tee -a /etc/postgresql-common/createcluster.conf >/dev/null
apt_install "${need[@]}"
