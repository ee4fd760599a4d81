#!/usr/bin/env bash
# The whole test suite against real servers (ZooKeeper, Redis, PostgreSQL, MariaDB) the tests start
# themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-base.sh
scripts/ensure-zookeeper.sh --interop
scripts/ensure-redis.sh
scripts/ensure-postgres.sh
scripts/ensure-mariadb.sh

servers='zklock-zk-|zklock-redis-|zklock-pg-|zklock-mariadb-'
before=$(pgrep -f "$servers" | sort || true)
# `cargo test --all-features --all-targets` and the doc tests, two test binaries at a time, and
# the PostgreSQL backend once more on its plain path.
scripts/run-tests.py "$@"
# No server of this suite may outlive it.
sleep 1
after=$(pgrep -f "$servers" | sort || true)
left=$(comm -13 <(echo "$before") <(echo "$after") | grep -v '^$' || true)
if [ -n "$left" ]; then
  echo "servers left running after the suite:" >&2
  ps -o pid,args -p $left >&2 || true
  exit 1
fi
echo "no ZooKeeper, Redis, PostgreSQL or MariaDB process left behind"
