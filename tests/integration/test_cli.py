"""`cela run` as a command: exit codes, streaming, JSON, bad input."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CELA, run, run_json


def test_exit_code_is_the_commands():
    assert run(["sh", "-c", "exit 42"]).returncode == 42
    assert run(["true"]).returncode == 0


def test_signal_death_is_128_plus_signal():
    r, _, p = run_json(["sh", "-c", "kill -SEGV $$"])
    assert r["state"] == "killed" and r["signal"] == 11, r
    assert p.returncode == 139


def test_stdout_and_stderr_are_separate_and_stdin_is_forwarded():
    p = run(["sh", "-c", "cat; echo err >&2"], input="hello\n")
    assert p.stdout == "hello\n"
    assert p.stderr == "err\n"


def test_output_streams_live():
    proc = subprocess.Popen([CELA, "run", "--template", "host", "--", "sh", "-c", "echo first; sleep 3; echo second"],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    t0 = time.monotonic()
    first = proc.stdout.readline()
    t_first = time.monotonic() - t0
    rest = proc.stdout.read()
    proc.wait(10)
    assert first == "first\n" and rest == "second\n"
    assert t_first < 2.5, f"first line arrived only after {t_first:.1f}s"


def test_json_result_shape_and_output_to_stderr():
    r, out, p = run_json(["sh", "-c", "echo to-out; echo to-err >&2"])
    assert set(r) == {"state", "exit_code", "signal", "reason", "duration_ms", "cpu_ms", "peak_memory_bytes",
                      "pids_peak"}
    assert r["state"] == "exited" and r["exit_code"] == 0
    assert "to-out" in out and "to-err" in out


def test_output_file(tmp_path):
    f = tmp_path / "out.txt"
    p = run(["sh", "-c", "echo a; echo b >&2"], opts=["--json", "--output-file", str(f)])
    assert json.loads(p.stdout)["exit_code"] == 0
    assert sorted(f.read_text().split()) == ["a", "b"]


@pytest.mark.parametrize("opts,needle", [
    (["--template", "no-such-template"], "unknown template"),
    (["--memory", "lots"], "bad size"),
    (["--disk", "12q"], "bad size"),
    (["--timeout", "soon"], "bad duration"),
    (["--cpus", "0"], "bad --cpus"),
    (["--user", "admin"], "bad --user"),
    (["--env", "NOEQUALS"], "bad --env"),
    (["--no-such-flag"], "no-such-flag"),
])
def test_bad_input_is_one_line_and_exit_2(opts, needle):
    args = [CELA, "run", *opts, "--", "true"]
    if "--template" not in opts:
        args[2:2] = ["--template", "host"]
    p = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p
    assert needle in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_missing_command_is_exit_2():
    p = subprocess.run([CELA, "run", "--template", "host"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "missing command" in p.stderr


def test_not_root_is_exit_2():
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", CELA, "run", "--template",
                        "host", "--", "true"], capture_output=True, text=True)
    assert p.returncode == 2, p
    assert "needs root" in p.stderr


def test_help_lists_the_options():
    p = subprocess.run([CELA, "run", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for opt in ("--template", "--memory", "--cpus", "--pids", "--timeout", "--disk", "--env", "--user", "--cwd",
                "--json"):
        assert opt in p.stdout


def test_env_is_repeatable_and_double_dash_ends_the_options():
    # CLI11 used to let --env swallow the `--`, so `-c` became an unknown option.
    p = run(["sh", "-c", "echo $K $L; echo \"$1\"", "sh", "--env"], opts=["--env", "K=V", "--env", "L=W"])
    assert (p.returncode, p.stdout) == (0, "V W\n--env\n"), p.stderr


def test_timeout_fires_when_the_command_never_reads_a_flood_of_stdin(tmp_path):
    # `yes | cela run ...`: more input than a pipe holds, and a command that never reads it.
    flood = tmp_path / "flood"
    flood.write_bytes(b"y\n" * (4 << 20))
    start = time.monotonic()
    with open(flood, "rb") as stdin:
        p = subprocess.run([CELA, "run", "--template", "host", "--timeout", "1s", "--json", "--", "sleep", "30"],
                           stdin=stdin, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert p.returncode == 124, p.stderr
    assert json.loads(p.stdout)["state"] == "timed_out"
    assert took < 10, f"the 1 s timeout fired after {took:.1f}s"


def test_timeout_fires_when_stdin_never_closes():
    # `sleep 100 | cela run ...`: stdin stays open and silent.
    start = time.monotonic()
    proc = subprocess.Popen([CELA, "run", "--template", "host", "--timeout", "1s", "--", "sleep", "30"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.wait(20)
        assert proc.returncode == 124, proc.stderr.read()
        assert time.monotonic() - start < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()


def test_large_stdin_reaches_the_command_whole():
    data = os.urandom(3 << 20)
    p = subprocess.run([CELA, "run", "--template", "host", "--", "sh", "-c", "sleep 0.5; wc -c"], input=data,
                       capture_output=True, timeout=60)
    assert (p.returncode, p.stdout.strip()) == (0, str(len(data)).encode()), p.stderr


def _subcommands(words):
    """The subcommand names a `cela WORDS --help` lists."""
    out = subprocess.run([CELA, *words, "--help"], capture_output=True, text=True).stdout
    names, listing = [], False
    for line in out.splitlines():
        if line.startswith("Subcommands:"):
            listing = True
        elif listing and line.startswith("  ") and line.split():
            names.append(line.split()[0])
    return names


def test_docs_cover_every_subcommand_and_option():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    top = _subcommands([])
    assert {"run", "template", "serve", "session", "exec", "logs", "cp"} <= set(top), top
    commands = []
    for name in top:
        subs = _subcommands([name])
        commands += [[name, s] for s in subs] or [[name]]
    for words in commands:
        assert f"cela {' '.join(words)}" in docs, f"docs/cli.md does not show `cela {' '.join(words)}`"
        out = subprocess.run([CELA, *words, "--help"], capture_output=True, text=True).stdout
        for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out)) - {"--help"}:
            assert f"`{opt}" in docs, f"docs/cli.md does not describe {opt} of `cela {' '.join(words)}`"
    heading = {w[0] for w in commands}
    for name in heading:
        section = docs.split(f"## `cela {name}", 1)
        assert len(section) == 2, f"no section for cela {name}"
        assert "xit code" in section[1].split("\n## ", 1)[0], f"the section of cela {name} gives no exit codes"
