#!/usr/bin/python3
"""Two cela builds on one host and the seccomp program cache (jail/seccomp.cc
cached_seccomp_program: one compiled program per binary under /run/cela, named by the
binary's device, inode, size and mtime). Two copies of the binary (different inode and
mtime) run `cela run --template host -- /bin/true` alternately; each run counts as a
hit when its program file was there before the run and is the same file (inode) after
it, not compiled and written again. A build that evicts every other build's program
on a miss makes every run after the first two a miss. A benchmark, not a test: it
asserts nothing.

    python3 bench/seccomp_cache.py --cela build/cela [--rounds 5]

Another cela on the host (a test run, another build) may write the cache at the same
time; `foreign_writes` counts program files that came or went during a run and belong
to neither copy.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

from spawn import cela_run_argv, spawn_wait
from stats import pct

CACHE_DIR = "/run/cela"  # jail/seccomp.h cached_seccomp_program's default


def program_path(binary, cache_dir=CACHE_DIR):
    st = os.stat(binary)
    # the nanoseconds unpadded, as std::to_string writes them
    return (f"{cache_dir}/seccomp-{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns // 10**9}."
            f"{st.st_mtime_ns % 10**9}.bpf")


def programs(cache_dir=CACHE_DIR):
    """{file name: (inode, mtime)} of the cached programs now."""
    out = {}
    try:
        names = os.listdir(cache_dir)
    except FileNotFoundError:
        return out
    for n in names:
        if n.startswith("seccomp-") and n.endswith(".bpf"):
            try:
                st = os.stat(os.path.join(cache_dir, n))
                out[n] = (st.st_ino, st.st_mtime_ns)
            except FileNotFoundError:
                pass
    return out


def classify(own, other, before, after):
    """One run's verdict from the cache dir before and after it: "hit" (its program was
    there and nothing replaced it), "miss" (it wrote its program), or "unknown" (no file
    of the expected name appeared: the cache moved or is named otherwise). Also whether
    the run removed the other copy's program, and the programs neither copy owns that
    came or changed meanwhile."""
    # A program is written to a temporary file renamed over the name: a new inode. A
    # hit may touch the file's times (to mark it used), which is no write.
    written = {n for n in after if n not in before or before[n][0] != after[n][0]}
    if own in after:
        verdict = "miss" if own in written else "hit"
    else:
        verdict = "miss" if written - {other} else "unknown"
    return verdict, other in before and other not in after, len(written - {own, other})


def seccomp_cache(cela, rounds=5, cache_dir=CACHE_DIR):
    """Runs two copies of `cela` alternately `rounds` times each; returns per copy the
    runs' verdicts (hit, miss, unknown) and times, how often a run evicted the other
    copy's program, and the count of runs after each copy's first that missed."""
    tmp = tempfile.mkdtemp(prefix="cela-bench-seccomp-")
    copies = {}
    try:
        for i, name in enumerate(("a", "b")):
            path = os.path.join(tmp, f"cela-{name}")
            shutil.copy2(cela, path)
            os.utime(path, ns=(time.time_ns(), time.time_ns() - (i + 1) * 10**9))  # distinct mtimes
            copies[name] = {"binary": path, "program": os.path.basename(program_path(path, cache_dir)),
                            "runs": [], "ms": [], "evicted_other": 0}
        foreign = 0
        for _ in range(rounds):
            for name, c in copies.items():
                other = copies["b" if name == "a" else "a"]["program"]
                before = programs(cache_dir)
                c["ms"].append(spawn_wait(cela_run_argv(c["binary"])))
                verdict, evicted, others = classify(c["program"], other, before, programs(cache_dir))
                c["runs"].append(verdict)
                c["evicted_other"] += evicted
                foreign += others
        out = {"rounds": rounds, "foreign_writes": foreign, "cache_dir": cache_dir, "copies": {}}
        for name, c in copies.items():
            hits = [m for m, r in zip(c["ms"], c["runs"]) if r == "hit"]
            misses = [m for m, r in zip(c["ms"], c["runs"]) if r == "miss"]
            out["copies"][name] = {"runs": c["runs"], "ms": c["ms"], "misses_after_first": c["runs"][1:].count("miss"),
                                   "evicted_other": c["evicted_other"],
                                   "hit_p50_ms": pct(hits, .5) if hits else None,
                                   "miss_p50_ms": pct(misses, .5) if misses else None}
        out["misses_after_first"] = sum(c["misses_after_first"] for c in out["copies"].values())
        out["evictions"] = sum(c["evicted_other"] for c in out["copies"].values())
        out["unknown"] = sum(c["runs"].count("unknown") for c in out["copies"].values())
        out["runs_after_first"] = 2 * (rounds - 1)
        return out
    finally:
        for c in copies.values():
            try:
                os.unlink(os.path.join(cache_dir, c["program"]))  # only the two copies' own programs
            except FileNotFoundError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="bench/results/seccomp_cache.json")
    a = ap.parse_args()
    out = seccomp_cache(a.cela, a.rounds)
    for name, c in out["copies"].items():
        print(f"copy {name}: {' '.join(c['runs'])}  (hit p50 {c['hit_p50_ms']}, miss p50 {c['miss_p50_ms']} ms; "
              f"evicted the other's program {c['evicted_other']} times)")
    print(f"misses after each copy's first run: {out['misses_after_first']} of {out['runs_after_first']} "
          f"(target 0); unknown: {out['unknown']}; foreign cache writes meanwhile: {out['foreign_writes']}")
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
