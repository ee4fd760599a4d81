#!/usr/bin/env bash
# Makes sure Debian's redis-server is present (the Redis backend's tests start their own servers),
# Debian's redis-py for the interop test and python3-venv for the bench's python-redis-lock
# (installed from PyPI into a virtualenv), installing them with apt-get if not. redis-server
# is not installed when REDIS_SERVER names a server of your own.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

need=()
if [ -z "${REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  need+=(redis-server)
fi
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || need+=(python3-redis)
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
apt_install "${need[@]}"
