#!/usr/bin/env bash
# Every cargo feature builds on its own without a warning, and the backend-neutral core builds
# with no backend at all — without compiling the ZooKeeper wire client.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo clippy --quiet --no-default-features -- -D warnings
if cargo tree --no-default-features -e normal --prefix none | grep -q '^zookeeper-client '; then
  echo "feature-check: a build without the zookeeper feature depends on zookeeper-client" >&2
  exit 1
fi
for feature in zookeeper testing metrics cli tls sasl-digest-md5; do
  cargo clippy --quiet --no-default-features --features "$feature" -- -D warnings
done
echo "feature-check: the core alone and each feature alone build clean"
