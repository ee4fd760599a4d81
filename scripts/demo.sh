#!/usr/bin/env bash
# The demo: starts a throwaway ZooKeeper (unless ZK_CONNECT is set) and runs the example.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${ZK_CONNECT:-}" ] || scripts/ensure-zookeeper.sh
cargo run --quiet --release --features testing --example fairness -- "$@"
