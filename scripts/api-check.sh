#!/usr/bin/env bash
# No foreign type in zklock's public API: reads the HTML that `cargo doc` made and fails on any
# item of another crate (other than std/core/alloc) named in a public signature, field or trait
# implementation. Blanket implementations (`impl<T> Foo for T` from dependencies) are not
# zklock's API and are skipped. A bump of such a crate would otherwise be a breaking change.
#
#   scripts/api-check.sh [doc dir, default target/doc/zklock]   (run `cargo doc` first)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${CARGO_TARGET_DIR:-target}/doc/zklock}
[ -d "$dir" ] || { echo "api-check: no docs in $dir (run cargo doc --no-deps --all-features)" >&2; exit 2; }

python3 - "$dir" <<'PY'
import pathlib
import re
import sys

allowed = {"zklock", "std", "core", "alloc"}
title = re.compile(r'title="(?:struct|enum|trait|type|fn|union|primitive|macro|constant|mod|traitalias) ([A-Za-z0-9_]+)::([A-Za-z0-9_:]+)"')
found = {}
pages = 0
for page in pathlib.Path(sys.argv[1]).rglob("*.html"):
    text = page.read_text(errors="replace")
    pages += 1
    # Blanket implementations come last on a page; they are the dependencies' API, not ours.
    cut = text.find('id="blanket-implementations"')
    if cut >= 0:
        text = text[:cut]
    for crate, item in title.findall(text):
        if crate not in allowed:
            found.setdefault(f"{crate}::{item}", set()).add(page.name)
if pages == 0:
    sys.exit(f"api-check: no HTML pages under {sys.argv[1]}")
if found:
    for item, where in sorted(found.items()):
        print(f"api-check: FAIL: foreign type {item} in the public API ({', '.join(sorted(where)[:4])})", file=sys.stderr)
    sys.exit(1)
print(f"api-check: OK: {pages} pages, no foreign type in a public signature")
PY
