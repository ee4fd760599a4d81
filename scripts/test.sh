#!/usr/bin/env bash
# The whole test suite against real servers (ZooKeeper, Redis, PostgreSQL, MariaDB) the tests start
# themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-zookeeper.sh --interop
scripts/ensure-redis.sh
scripts/ensure-postgres.sh
scripts/ensure-mariadb.sh

servers='zklock-zk-|zklock-redis-|zklock-pg-|zklock-mariadb-'
before=$(pgrep -f "$servers" | sort || true)
cargo test --all-features --all-targets -- "$@"
cargo test --all-features --doc
# The PostgreSQL backend once more on its plain path (every statement through the Client's
# zklock-pg-io thread), as it runs off Linux: its conformance scenarios and its own tests.
plain='ZKLOCK_PG_CALLER_DRIVES=0'
for run in '--test conformance -- postgres::' '--test postgres'; do
  echo "+ $plain cargo test --all-features $run"
  # shellcheck disable=SC2086 # $run is the arguments, split on purpose
  env "$plain" cargo test --all-features $run
done
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
