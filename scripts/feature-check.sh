#!/usr/bin/env bash
# Every cargo feature builds on its own without a warning, and the backend-neutral core builds
# with no backend at all — without compiling the ZooKeeper wire client.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo clippy --quiet --no-default-features -- -D warnings
# A build with one backend compiles none of the others' clients.
deps() { cargo tree --no-default-features "$@" -e normal --prefix none; }
if deps | grep -Eq '^(zookeeper-client|redis|tokio-postgres|mysql) '; then
  echo "feature-check: the core alone depends on a backend's client" >&2
  exit 1
fi
if deps --features redis | grep -q '^zookeeper-client '; then
  echo "feature-check: a build with only the redis feature depends on zookeeper-client" >&2
  exit 1
fi
if deps --features zookeeper | grep -Eq '^(redis|tokio-postgres) '; then
  echo "feature-check: a build with only the zookeeper feature depends on redis or tokio-postgres" >&2
  exit 1
fi
if deps --features redis | grep -q '^tokio-postgres '; then
  echo "feature-check: a build with only the redis feature depends on tokio-postgres" >&2
  exit 1
fi
if deps --features postgres | grep -Eq '^(zookeeper-client|redis) '; then
  echo "feature-check: a build with only the postgres feature depends on zookeeper-client or redis" >&2
  exit 1
fi
if deps --features mysql | grep -Eq '^(zookeeper-client|redis|tokio-postgres) '; then
  echo "feature-check: a build with only the mysql feature depends on another backend's client" >&2
  exit 1
fi
for feature in zookeeper redis postgres postgres-sync postgres-async mysql testing metrics cli tls sasl-digest-md5; do
  echo "feature-check: $feature alone (${SECONDS}s)"
  cargo clippy --quiet --no-default-features --features "$feature" -- -D warnings
done
# A backend's TLS is its client's own (`tls` turns on `mysql?/rustls-tls` and the like).
echo "feature-check: mysql with tls (${SECONDS}s)"
cargo clippy --quiet --no-default-features --features mysql,tls -- -D warnings
echo "feature-check: the core alone, each feature alone and mysql with tls build clean"
