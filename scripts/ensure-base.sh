#!/usr/bin/env bash
# Makes sure the plain tools every part of the suite uses are present, installing them with
# apt-get if not: ps, pgrep and kill (procps; slim Debian images lack them), python3 (the
# benches' peers and the interop tests), openssl (the TLS tests make their certificates with it).
# `scripts/external-check.py` lists every external command and Python module the tests and
# benches use, and which set-up script installs each.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

need=()
for tool in ps pgrep; do command -v "$tool" >/dev/null 2>&1 || need+=(procps); done
[ -x /usr/bin/kill ] || [ -x /bin/kill ] || need+=(procps)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
apt_install "${need[@]}"
