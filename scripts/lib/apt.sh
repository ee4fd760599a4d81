# Sourced by the scripts/ensure-*.sh set-up scripts: one way to install Debian packages.
#
# `apt_install PKG...` installs the named packages with apt-get (quietly, without recommends),
# through sudo when not run as root; it does nothing when given no package, and says what it is
# about to install first. `apt_sudo` is the prefix it uses ("" as root, "sudo" otherwise), for
# the few steps a script takes around the install.

apt_sudo=""
if [ "$(id -u)" -ne 0 ]; then
  apt_sudo="sudo"
fi

apt_install() {
  [ $# -eq 0 ] && return 0
  local pkgs
  mapfile -t pkgs < <(printf '%s\n' "$@" | sort -u)
  echo "zklock: installing ${pkgs[*]} with apt-get" >&2
  if [ -n "$apt_sudo" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "zklock: run as root or install sudo to install ${pkgs[*]}" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $apt_sudo apt-get update -qq
  $apt_sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
}
