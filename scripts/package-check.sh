#!/usr/bin/env bash
# Is the crate ready to publish? The declared rust-version is honest (and the check can fail),
# every integration test declares the feature it needs, the package holds what it should and
# nothing else, `cargo publish --dry-run` builds it, and its tests, examples and benchmark
# compile from the unpacked package alone.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/msrv-check.sh --locked
if MSRV_DECLARED=1.60 scripts/msrv-check.sh --locked >/dev/null 2>&1; then
  echo "package-check: FAIL: msrv-check accepted rust-version 1.60, below what uuid declares" >&2
  exit 1
fi
echo "package-check: msrv-check rejects a rust-version below the dependencies' (1.60)"

# Publishing drops the path dev-dependency that turns `testing` on, so each [[test]] says so.
for t in tests/*.rs; do
  name=$(basename "$t" .rs)
  if ! grep -A2 "^name = \"$name\"\$" Cargo.toml | grep -qE 'required-features = \[("[a-z-]+", )*"testing"(, "[a-z-]+")*\]'; then
    echo "package-check: FAIL: tests/$name.rs has no [[test]] entry whose required-features list \"testing\" in Cargo.toml" >&2
    exit 1
  fi
done

list=$(cargo package --locked --allow-dirty --list)
for must in Cargo.toml LICENSE README.md CHANGELOG.md src/lib.rs tests/common/mod.rs tests/java/CuratorChaosWorker.java; do
  grep -qx "$must" <<<"$list" || { echo "package-check: FAIL: the package lacks $must" >&2; exit 1; }
done
if stray=$(grep -E '^(\.ci/|scripts/|target/)' <<<"$list"); then
  echo "package-check: FAIL: the package would ship $stray" >&2
  exit 1
fi
echo "package-check: $(wc -l <<<"$list") files in the package, no CI or scripts"

echo "package-check: publish dry run (${SECONDS}s)"
cargo publish --locked --dry-run --allow-dirty
echo "package-check: the unpacked package's targets (${SECONDS}s)"

# Compile the package's own tests, examples and benchmark, as a user of the .crate would.
version=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')
unpacked="target/package/zklock-$version"
(cd "$unpacked" && CARGO_TARGET_DIR=../check-target cargo check --quiet --all-targets --features testing)
echo "package-check: OK"
