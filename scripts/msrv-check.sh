#!/usr/bin/env bash
# Is zklock's declared `rust-version` honest? Reads the resolved dependency graph from
# `cargo metadata --all-features` and finds the highest `rust-version` declared by any package the
# library builds with (normal and build dependencies, transitively, on every platform). Fails when a
# dependency needs more than Cargo.toml declares, e.g. after `cargo update` pulled in a release with
# a higher MSRV. Dev-dependencies are reported separately: they do not bind users.
#
#   scripts/msrv-check.sh [cargo metadata options, e.g. --locked, --offline, --filter-platform T]
#
# MSRV_DECLARED=1.76 scripts/msrv-check.sh checks against that value instead of Cargo.toml's (CI
# uses it to show that the check does fail on a declared value that is too low).
#
# Only declared `rust-version`s are seen: a dependency that declares none, or the crate's own use of
# a recently stabilised API, is not (no second toolchain here to build with).
set -euo pipefail
cd "$(dirname "$0")/.."

meta=$(mktemp)
trap 'rm -f "$meta"' EXIT
cargo metadata --format-version 1 --all-features "$@" >"$meta"

python3 - "$meta" <<'EOF'
import json
import os
import sys
from collections import deque

meta = json.load(open(sys.argv[1]))
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root_id = meta["resolve"]["root"]
root = packages[root_id]


def version_key(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def label(pid):
    p = packages[pid]
    return f"{p['name']} {p['version']}"


def walk(starts, kinds_from_root):
    """Packages reachable from `starts` through normal and build edges; `parent` gives a path back."""
    parent = {}
    queue = deque()
    for pid, via in starts:
        # A dev-dependency on the crate itself (for its features) is an edge back to the root.
        if pid != root_id and pid not in parent:
            parent[pid] = via
            queue.append(pid)
    while queue:
        pid = queue.popleft()
        for dep in nodes[pid]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if pid == root_id and not kinds & kinds_from_root:
                continue
            if pid != root_id and not kinds & {None, "build"}:
                continue
            if dep["pkg"] != root_id and dep["pkg"] not in parent:
                parent[dep["pkg"]] = pid
                queue.append(dep["pkg"])
    return parent


def chain(pid, parent):
    names = []
    while pid is not None and packages[pid]["name"] not in names:
        names.append(packages[pid]["name"])
        pid = parent.get(pid)
    return " -> ".join(reversed(names))


def root_edges(kinds):
    return [
        (d["pkg"], root_id)
        for d in nodes[root_id]["deps"]
        if {k["kind"] for k in d["dep_kinds"]} & kinds
    ]


lib = walk(root_edges({None, "build"}), {None, "build"})
dev_all = walk(root_edges({"dev"}), {"dev"})
dev = {pid: via for pid, via in dev_all.items() if pid not in lib}

declared = os.environ.get("MSRV_DECLARED") or root.get("rust_version")
name = root["name"]
if not declared:
    print(f"msrv-check: FAIL: {name} declares no rust-version in Cargo.toml", file=sys.stderr)
    sys.exit(1)


def highest(graph):
    with_rv = [pid for pid in graph if packages[pid].get("rust_version")]
    if not with_rv:
        return None, []
    top = max(version_key(packages[pid]["rust_version"]) for pid in with_rv)
    return top, sorted(
        (pid for pid in with_rv if version_key(packages[pid]["rust_version"]) == top), key=label
    )


def over(graph):
    return sorted(
        (pid for pid in graph
         if packages[pid].get("rust_version")
         and version_key(packages[pid]["rust_version"]) > version_key(declared)),
        key=lambda pid: (version_key(packages[pid]["rust_version"]), label(pid)),
        reverse=True,
    )


def show(title, graph, parents):
    top, who = highest(graph)
    if top is None:
        print(f"  {title} ({len(graph)} packages): none declares a rust-version")
        return
    rv = packages[who[0]]["rust_version"]
    print(f"  {title} ({len(graph)} packages): highest {rv}, declared by")
    for pid in who:
        print(f"    {label(pid)}  (via {chain(pid, parents)})")


print(f"msrv-check: {name} {root['version']} declares rust-version = \"{declared}\"")
show("library: normal + build dependencies, --all-features, all platforms", lib, lib)
show("dev-dependencies only (do not bind users)", dev, dev_all)

for pid in over(dev):
    p = packages[pid]
    print(f"  note: dev-dependency {label(pid)} needs Rust {p['rust_version']} "
          f"(via {chain(pid, dev_all)}); tests and benches need it, users do not")

bad = over(lib)
if bad:
    for pid in bad:
        p = packages[pid]
        print(f"msrv-check: FAIL: {label(pid)} needs Rust {p['rust_version']} but {name} declares "
              f"rust-version = \"{declared}\" (via {chain(pid, lib)})", file=sys.stderr)
    need = packages[bad[0]]["rust_version"]
    print(f"msrv-check: raise rust-version in Cargo.toml to {need} (and say so in CHANGELOG.md), "
          f"or keep the dependency at a release that declares at most {declared}", file=sys.stderr)
    sys.exit(1)
print(f"msrv-check: OK: no library dependency needs more than {declared}")
EOF
