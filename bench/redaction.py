#!/usr/bin/env python3
"""Redaction throughput: runs build/bench/cela_redaction_bench (Google Benchmark) and
prints MiB/s for a 100 MiB stream with 50 secrets against a plain copy, and the ratio.

    python3 bench/redaction.py [--bench build/bench/cela_redaction_bench]
"""
import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

p = argparse.ArgumentParser()
p.add_argument("--bench", default=str(ROOT / "build" / "bench" / "cela_redaction_bench"))
p.add_argument("--repetitions", type=int, default=3)
a = p.parse_args()
out = subprocess.run([a.bench, "--benchmark_format=json", f"--benchmark_repetitions={a.repetitions}",
                      "--benchmark_report_aggregates_only=true"], check=True, capture_output=True, text=True)
rates = {}
for b in json.loads(out.stdout)["benchmarks"]:
    if b.get("aggregate_name") == "median":
        rates[b["run_name"].split("/")[0]] = b["bytes_per_second"] / (1 << 20)
plain, redact = rates["BM_PlainCopy"], rates["BM_Redact50Secrets"]
print(f"plain copy:              {plain:10.1f} MiB/s")
print(f"redaction, 50 secrets:   {redact:10.1f} MiB/s")
print(f"ratio (redaction/plain): {redact / plain:10.4f}  (plain is {plain / redact:.1f}x faster)")
