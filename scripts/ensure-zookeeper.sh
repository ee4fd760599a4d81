#!/usr/bin/env bash
# Makes sure a JRE and Debian's ZooKeeper jars are present, installing them with apt-get if not.
# Also the openssl command (TLS test servers). With --interop also a JDK (javac) and Apache Curator's jars, for the Curator interop tests,
# and Debian's kazoo for Python 3 (python3-kazoo), for the kazoo interop tests; --kazoo installs only the latter beside the server.
# ZooKeeper is not installed when ZOOKEEPER_CLASSPATH points at jars of your own.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
if [ -z "${ZOOKEEPER_CLASSPATH:-}" ] && [ ! -f /usr/share/java/zookeeper.jar ]; then
  need+=(zookeeper)
fi
# TLS TestingServers make their certificates with the openssl command.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${1:-}" = "--interop" ]; then
  command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
  [ -f /usr/share/java/curator-recipes.jar ] || need+=(libcurator-recipes-java)
fi
if [ "${1:-}" = "--interop" ] || [ "${1:-}" = "--kazoo" ]; then
  /usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1 || need+=(python3-kazoo)
fi
apt_install "${need[@]}"
