#!/usr/bin/env python3
"""Checks every #include of src/ against the layering table (layers.txt next to this
script): a quoted include of another folder must be allowed for the including
folder, a system include must not be forbidden for it. Fails with one line per
violation naming the file, the include and the rule.

  check_includes.py SRC_DIR [--rules layers.txt]
  check_includes.py --self-test      proves the checker catches what it must
"""
import argparse
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp")


class Rules:
    def __init__(self):
        self.allow = {}      # folder -> set of folders
        self.forbid = {}     # folder -> list of system header prefixes
        self.exceptions = set()  # (file relative to the repo, include)


def parse_rules(text, origin="layers.txt"):
    rules = Rules()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind in ("allow", "forbid"):
            folder, colon, deps = rest.partition(":")
            if not colon:
                raise SystemExit(f"{origin}:{number}: want `{kind} FOLDER: ...`")
            items = deps.split()
            if kind == "allow":
                rules.allow[folder.strip()] = set(items)
            else:
                rules.forbid.setdefault(folder.strip(), []).extend(items)
        elif kind == "except":
            file, arrow, include = rest.partition("->")
            if not arrow:
                raise SystemExit(f"{origin}:{number}: want `except FILE -> INCLUDE`")
            rules.exceptions.add((file.strip(), include.strip()))
        else:
            raise SystemExit(f"{origin}:{number}: unknown rule `{kind}`")
    return rules


def source_files(src_dir):
    for root, _, files in os.walk(src_dir):
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(root, name)


def check(src_dir, rules):
    """Returns (violations, used exceptions)."""
    src_dir = os.path.normpath(src_dir)
    repo = os.path.dirname(src_dir)
    violations, used = [], set()
    for path in source_files(src_dir):
        rel_src = os.path.relpath(path, src_dir)
        rel_repo = os.path.relpath(path, repo)
        folder = rel_src.split(os.sep)[0] if os.sep in rel_src else ""
        if folder not in rules.allow:
            violations.append(f"{rel_repo}: folder src/{folder} has no `allow {folder}:` line in the layering table")
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                delim, include = m.groups()
                close = '"' if delim == '"' else ">"
                where = f"{rel_repo}:{number}: #include {delim}{include}{close}"
                if delim == "<":
                    for prefix in rules.forbid.get(folder, []):
                        if ("<" + include + ">").startswith(prefix):
                            shown = prefix if prefix.endswith(">") else prefix + "...>"
                            violations.append(f"{where}: src/{folder} must not include {shown} "
                                              f"(rule `forbid {folder}: {prefix}`)")
                    continue
                target = include.split("/")[0] if "/" in include else ""
                if not target:
                    # A bare name: a header beside the includer is its own folder.
                    if os.path.exists(os.path.join(os.path.dirname(path), include)):
                        continue
                    violations.append(f"{where}: not a path under src/ (write \"folder/{include}\")")
                    continue
                if target == folder:
                    continue
                if target not in rules.allow:
                    violations.append(f"{where}: src/{target} is not a folder of the layering table")
                    continue
                if target in rules.allow[folder]:
                    continue
                if (rel_repo, include) in rules.exceptions:
                    used.add((rel_repo, include))
                    continue
                allowed = " ".join(sorted(rules.allow[folder])) or "nothing"
                violations.append(f"{where}: src/{folder} may not depend on src/{target} "
                                  f"(rule `allow {folder}: {allowed}`)")
    return violations, used


def run(src_dir, rules_path):
    with open(rules_path, encoding="utf-8") as f:
        rules = parse_rules(f.read(), rules_path)
    violations, used = check(src_dir, rules)
    for stale in sorted(rules.exceptions - used):
        print(f"note: exception no longer needed, remove it from {os.path.basename(rules_path)}: "
              f"except {stale[0]} -> {stale[1]}")
    if violations:
        print(f"layering: {len(violations)} include(s) against the layering "
              f"({os.path.relpath(rules_path)}):", file=sys.stderr)
        for v in violations:
            print("  " + v, file=sys.stderr)
        return 1
    files = sum(1 for _ in source_files(src_dir))
    print(f"layering: {files} files follow the layering ({len(used)} known exceptions)")
    return 0


def self_test():
    """A tiny tree with one violation of each kind: each must be reported."""
    rules = parse_rules("""
        allow common:
        allow jail: common
        allow session: jail common
        allow api: session common
        forbid jail: <sqlite3.h>
        except src/session/known.cc -> api/bad.h   // an accepted one
    """)
    files = {
        "common/ok.h": '#include <string>\n',
        "common/up.h": '#include "jail/x.h"\n',                 # common depends on nothing
        "jail/x.h": '#include "common/ok.h"\n#include <sqlite3.h>\n',
        "jail/y.cc": '#include "session/s.h"\n',                # upward
        "session/s.h": '#include "jail/x.h"\n#include "common/ok.h"\n',
        "session/known.cc": '#include "api/bad.h"\n',           # excepted
        "api/bad.h": '#include "session/s.h"\n#include "nowhere/z.h"\n',
        "api/local.cc": '#include "bad.h"\n#include "missing.h"\n',
        "extra/e.h": '\n',                                      # folder without a rule
    }
    expected = [
        ("src/common/up.h", "jail/x.h", "allow common: nothing"),
        ("src/jail/x.h", "sqlite3.h", "forbid jail: <sqlite3.h>"),
        ("src/jail/y.cc", "session/s.h", "allow jail: common"),
        ("src/api/bad.h", "nowhere/z.h", "not a folder of the layering table"),
        ("src/api/local.cc", "missing.h", "not a path under src/"),
        ("src/extra/e.h", "", "no `allow extra:` line"),
    ]
    with tempfile.TemporaryDirectory() as repo:
        src = os.path.join(repo, "src")
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        violations, used = check(src, rules)
    failures = []
    for file, include, rule in expected:
        if not any(v.startswith(file) and include in v and rule in v for v in violations):
            failures.append(f"not reported: {file} {include} ({rule})")
    if len(violations) != len(expected):
        failures.append(f"{len(violations)} violations reported, {len(expected)} expected:\n  " +
                        "\n  ".join(violations))
    if used != {("src/session/known.cc", "api/bad.h")}:
        failures.append(f"the exception was not applied: {used}")
    for f in failures:
        print("self-test: " + f, file=sys.stderr)
    if not failures:
        print(f"self-test: all {len(expected)} planted violations reported, the exception honoured")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", nargs="?", help="the src/ directory")
    ap.add_argument("--rules", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers.txt"))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.src:
        ap.error("give the src/ directory")
    return run(args.src, args.rules)


if __name__ == "__main__":
    sys.exit(main())
