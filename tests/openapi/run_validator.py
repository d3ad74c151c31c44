#!/usr/bin/env python3
"""ctest entry openapi.validate / openapi.rejects_broken: prints the daemon's OpenAPI
document with cela_openapi_dump, then runs validate.mjs on it with the validator that
`npm ci --prefix tests/openapi` installed from the committed lockfile (make
openapi-deps). Installs nothing itself."""
import argparse
import os
import subprocess
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="the cela_openapi_dump binary")
    ap.add_argument("--node", default="", help="node executable")
    ap.add_argument("--validator-dir", required=True, help="tests/openapi (package.json, node_modules)")
    ap.add_argument("--mode", choices=["validate", "rejects_broken"], required=True)
    args = ap.parse_args()

    if not args.node or not os.path.exists(args.node):
        print("openapi: node not found: install Debian's nodejs and npm (make deps)", file=sys.stderr)
        return 1
    package = os.path.join(args.validator_dir, "node_modules", "@readme", "openapi-parser")
    if not os.path.isdir(package):
        print(f"openapi: the validator is not installed in {args.validator_dir}/node_modules: "
              f"run `make openapi-deps` (npm ci --prefix tests/openapi)", file=sys.stderr)
        return 1

    dumped = subprocess.run([args.dump], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if dumped.returncode != 0:
        sys.stderr.write(dumped.stderr.decode(errors="replace"))
        print(f"openapi: {args.dump} failed with {dumped.returncode}", file=sys.stderr)
        return 1
    with tempfile.NamedTemporaryFile("wb", suffix=".json", prefix="cela-openapi-") as f:
        f.write(dumped.stdout)
        f.flush()
        script = os.path.join(args.validator_dir, "validate.mjs")
        return subprocess.run([args.node, script, args.mode, f.name]).returncode


if __name__ == "__main__":
    sys.exit(main())
