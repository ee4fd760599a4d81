#!/usr/bin/env bash
# The demo: processes queueing fairly on one lock.
#
#   scripts/demo.sh            on file:// in a temporary directory: no server, no install, no root
#   scripts/demo.sh URL        the same demo on any lock URL (zk://…, redis://…, postgres://…)
#   scripts/demo.sh zk [ARGS]  the ZooKeeper demo: installs ZooKeeper if missing (apt-get: root),
#                              starts a throwaway server unless ZK_CONNECT is set, and shows the
#                              queue's nodes (ARGS: --unfair for the random-order driver)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    zk)
        shift
        [ -n "${ZK_CONNECT:-}" ] || scripts/ensure-zookeeper.sh
        exec cargo run --quiet --release --features testing --example fairness -- "$@"
        ;;
    "")
        cargo run --quiet --example fair_queue
        echo
        echo "The same demo on a throwaway ZooKeeper: scripts/demo.sh zk"
        echo "On a server of your own:                scripts/demo.sh zk://127.0.0.1:2181"
        ;;
    *)
        exec cargo run --quiet --all-features --example fair_queue -- "$@"
        ;;
esac
