#!/usr/bin/env python3
"""Fails on any import circle between the files of one folder of the library or the CLI.

A file depends on a sibling when it names an item the sibling holds, through a `crate::`,
`super::` or `self::` path (in a `use` or inline), or through a re-export of the folder's
module file (`mod.rs` or `<folder>.rs`, which is not itself a node: it only gathers). Each
strongly connected group of two or more sibling files is a circle, printed with one route
around it. Exits 1 when there is any.

    scripts/import-cycles.py [-v] [SRC]   # SRC defaults to the crate's src/; -v: what each
                                          # file of a circle names in the next
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """The code without comments, strings and char literals (their contents would read as paths)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\", i):
            end = text.find("'", i + 2 if text[i + 1] != "\\" else i + 3)
            out.append("' '")
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e'] (`as` renames and `self` dropped)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+" + IDENT, "", tree))
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    paths = []
    for p in filter(None, parts):
        for e in expand(p):
            paths.append((prefix + e) if e != "self" else prefix.rstrip(":"))
    return paths


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.code = ""
        self.items = set()  # names defined here
        self.imports = {}  # name brought in by `use` → absolute path (tuple)
        self.refs = []  # absolute paths named


def load(src, root_file, files):
    """Modules of one crate: root_file is lib.rs or main.rs, files every .rs below its folder."""
    base = os.path.dirname(root_file)
    mods = {}
    for f in files:
        rel = os.path.relpath(f, base)
        if f == root_file:
            path = ()
        else:
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            path = tuple(parts)
        mods[path] = Module(path, f)
    for m in mods.values():
        with open(m.file, encoding="utf-8") as fh:
            m.code = strip(fh.read())
        m.items = set(
            re.findall(r"\b(?:struct|enum|trait|fn|type|const|static|union|mod|macro_rules!)\s+(" + IDENT + ")", m.code)
        )
    return mods


def absolute(mod, path):
    """The absolute path (tuple) of a `crate::`/`super::`/`self::` path written in mod."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    here = list(mod.path)
    if segs[0] == "crate":
        here, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if not here:
                    return None
                here.pop()
            segs = segs[1:]
    else:
        return None
    return tuple(here + segs)


def scan(mods):
    for m in mods.values():
        for stmt in re.findall(r"\buse\s+([^;]*);", m.code):
            for p in expand(stmt):
                target = absolute(m, p)
                if target is None:
                    # a `use name::...` of a child module declared here
                    first = p.split("::")[0]
                    if m.path + (first,) in mods:
                        target = m.path + tuple(s for s in p.split("::") if s)
                if target:
                    if not target[-1] == "*":
                        m.imports[target[-1]] = target
                    m.refs.append(target)
        for p in re.findall(r"\b(?:crate|super|self)(?:::" + IDENT + ")+", m.code):
            target = absolute(m, p)
            if target:
                m.refs.append(target)
        # `child::item` written inline, where `child` is a module declared here
        for child, rest in re.findall(r"(?<![:\w])(" + IDENT + r")((?:::" + IDENT + ")+)", m.code):
            if m.path + (child,) in mods:
                m.refs.append(m.path + (child,) + tuple(s for s in rest.split("::") if s))


def owner(mods, path, seen=None):
    """The module (tuple) whose file holds the item at path, following re-exports."""
    seen = seen or set()
    if path in seen:
        return None
    seen.add(path)
    for cut in range(len(path), -1, -1):
        head = path[:cut]
        if head not in mods:
            continue
        if cut == len(path):
            return head
        name = path[cut]
        m = mods[head]
        if name in m.items:
            return head
        if name in m.imports:
            return owner(mods, m.imports[name] + path[cut + 1:], seen)
        return head
    return None


def circles(mods):
    folders = {}
    for p in mods:
        if p:
            folders.setdefault(p[:-1], set()).add(p)
    found = []
    for folder, children in sorted(folders.items()):
        nodes = set(children)
        edges = {n: set() for n in nodes}
        why = {}
        for n in nodes:
            for ref in mods[n].refs:
                o = owner(mods, ref)
                if o is None:
                    continue
                # the sibling (or the folder's module file) the owner lies in
                if o == folder:
                    t = folder
                elif o[: len(folder)] == folder and len(o) > len(folder):
                    t = o[: len(folder) + 1]
                else:
                    continue
                if t != n and t in nodes:
                    edges[n].add(t)
                    why.setdefault((n, t), set()).add("::".join(ref[len(folder):]))
        for comp in scc(nodes, edges):
            if len(comp) > 1:
                found.append((folder, comp, edges, why))
    return found


def scc(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def route(comp, edges):
    """One closed walk through the circle's files, from its first."""
    comp = set(comp)
    start = min(comp)
    # breadth-first back to start from each successor
    best = None
    for nxt in sorted(edges[start] & comp):
        prev, queue = {nxt: None}, [nxt]
        while queue:
            v = queue.pop(0)
            if v == start:
                break
            for w in sorted(edges[v] & comp):
                if w not in prev:
                    prev[w] = v
                    queue.append(w)
        if start in prev:
            walk, v = [], start
            while v is not None:
                walk.append(v)
                v = prev[v]
            walk = [start] + walk[::-1]
            if best is None or len(walk) < len(best):
                best = walk
    return best


def name(crate, folder, node):
    if node == folder:
        return "(" + (node[-1] if node else crate) + ")"
    return node[-1]


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    src = os.path.normpath(src)
    crates = []
    lib = os.path.join(src, "lib.rs")
    bins = os.path.join(src, "bin")
    lib_files = []
    for d, dirs, fs in os.walk(src):
        if os.path.commonpath([d, bins]) == bins:
            continue
        lib_files += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
    crates.append(("zklock", lib, lib_files))
    if os.path.isdir(bins):
        for b in sorted(os.listdir(bins)):
            main_rs = os.path.join(bins, b, "main.rs")
            if os.path.isfile(main_rs):
                fs = [os.path.join(d, f) for d, _, ff in os.walk(os.path.join(bins, b)) for f in ff if f.endswith(".rs")]
                crates.append(("bin " + b, main_rs, fs))
    total = 0
    for crate, root, files in crates:
        mods = load(src, root, files)
        scan(mods)
        for folder, comp, edges, why in circles(mods):
            total += 1
            where = "/".join(folder) or "."
            walk = route(comp, edges)
            print(f"circle in {crate} {where}/: " + " -> ".join(name(crate, folder, n) for n in walk)
                  + f"  ({len(comp)} files: " + ", ".join(name(crate, folder, n) for n in comp) + ")")
            if verbose:
                for a in comp:
                    for b in comp:
                        if (a, b) in why:
                            print(f"    {a[-1]} -> {b[-1]}: " + ", ".join(sorted(why[(a, b)])))
    print(f"import circles: {total}")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
