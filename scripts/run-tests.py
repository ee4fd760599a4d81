#!/usr/bin/env python3
"""Runs the whole test suite with its test binaries side by side.

Builds every test target once (`cargo test --all-features --all-targets --no-run`), then runs
the test binaries and the doc tests JOBS at a time (ZKLOCK_TEST_JOBS, default 2), the slowest
first: by the times of the last run without arguments (kept in target/run-tests-times.json),
else by a built-in list. Most of the suite waits on servers, not on the CPU, so two binaries at
a time roughly halve the wall time; each binary still runs its own tests in parallel, as `cargo
test` does. Each binary's output is printed as one block when it ends, with its wall time and
the CPU time it and its children (the servers it started) used. Arguments are passed
to every test binary (a name filter, `--nocapture`, ...). Without arguments the PostgreSQL
backend's tests run a second time on its plain path (`ZKLOCK_PG_CALLER_DRIVES=0`: every
statement through the Client's zklock-pg-io thread, as off Linux). Exits non-zero if any binary
failed.

    scripts/run-tests.py [test binary arguments]
"""

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The longest binaries in CI runs, started first so that none of them ends the run alone, when
# there are no times of a last run.
SLOWEST = ["conformance", "doc tests", "mysql_table", "chaos", "no_hidden_hangs", "chaos_redis",
           "cli", "conformance on the plain path", "mysql", "redis_sentinel", "redis_cluster"]
# Each run's wall time in the last run without arguments, by name.
TIMES = os.path.join(ROOT, "target", "run-tests-times.json")
# The PostgreSQL backend's plain path: the binaries and the tests to run there.
PLAIN_PATH = {"conformance": ["postgres::"], "postgres": []}


def test_binaries():
    """(name, source, executable) of every test binary, as cargo builds them."""
    built = subprocess.run(
        ["cargo", "test", "--all-features", "--all-targets", "--no-run",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True,
    )
    found = []
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message["profile"]["test"]:
            continue
        if message.get("executable"):
            target = message["target"]
            kind = target["kind"][0]
            name = target["name"] if kind == "test" else f"{kind} {target['name']}"
            found.append((name, target["src_path"], message["executable"]))
    return found


def last_times():
    """The wall time of each run in the last run without arguments, or {} if none is kept."""
    try:
        with open(TIMES) as f:
            return {name: float(took) for name, took in json.load(f).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def order(runs):
    """The runs, the slowest first: by the last run's times, else by SLOWEST."""
    times = last_times()
    if times:
        return sorted(runs, key=lambda r: (-times.get(r[0], 0.0), r[0]))
    rank = {name: i for i, name in enumerate(SLOWEST)}
    return sorted(runs, key=lambda r: (rank.get(r[0], len(SLOWEST)), r[0]))


def main():
    args = sys.argv[1:]
    jobs = int(os.environ.get("ZKLOCK_TEST_JOBS", "2"))
    binaries = test_binaries()
    runs = [(name, [exe, *args], f"{os.path.relpath(src, ROOT)} ({os.path.relpath(exe, ROOT)})", {})
            for name, src, exe in binaries]
    runs.append(("doc tests", ["cargo", "test", "--all-features", "--doc", "--", *args],
                 "cargo test --doc", {}))
    if not args:
        plain = {"ZKLOCK_PG_CALLER_DRIVES": "0"}
        runs += [(f"{name} on the plain path", [exe, *PLAIN_PATH[name]],
                  f"ZKLOCK_PG_CALLER_DRIVES=0 {os.path.relpath(exe, ROOT)} {' '.join(PLAIN_PATH[name])}",
                  plain)
                 for name, _, exe in binaries if name in PLAIN_PATH]
    runs = order(runs)
    print(f"run-tests: built; {len(runs)} runs, {jobs} at a time", flush=True)
    printing = threading.Lock()
    failed = []
    took_by_name = {}

    def run(item):
        name, command, label, env = item
        started = time.monotonic()
        child = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # Read to the end, then reap the child with wait4 for the CPU time it and the children
        # it waited for used.
        output = child.stdout.read().decode(errors="replace")
        child.stdout.close()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        took = time.monotonic() - started
        cpu = usage.ru_utime + usage.ru_stime
        with printing:
            print(f"     Running {label}", flush=True)
            sys.stdout.write(output)
            verdict = "ok" if child.returncode == 0 else f"FAILED (exit {child.returncode})"
            print(f"run-tests: {name}: {verdict} in {took:.1f}s (CPU {cpu:.1f}s)", flush=True)
            took_by_name[name] = round(took, 1)
            if child.returncode != 0:
                failed.append(name)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, runs))
    print(f"run-tests: {len(runs)} runs, {jobs} at a time, in {time.monotonic() - started:.0f}s")
    if not args:
        os.makedirs(os.path.dirname(TIMES), exist_ok=True)
        with open(TIMES, "w") as f:
            json.dump(took_by_name, f, indent=0, sort_keys=True)
    if failed:
        print(f"run-tests: FAILED: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
