#!/usr/bin/env bash
# Makes sure the plain tools every part of the suite uses are present, installing them with
# apt-get if not: ps, pgrep and kill (procps; slim Debian images lack them), python3 (the
# benches' peers and the interop tests), openssl (the TLS tests make their certificates with it).
# `scripts/external-check.py` lists every external command and Python module the tests and
# benches use, and which set-up script installs each.
set -euo pipefail

need=()
for tool in ps pgrep; do command -v "$tool" >/dev/null 2>&1 || need+=(procps); done
[ -x /usr/bin/kill ] || [ -x /bin/kill ] || need+=(procps)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
[ ${#need[@]} -eq 0 ] && exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

echo "zklock: installing ${need[*]} with apt-get" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "zklock: run as root or install sudo to install ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
