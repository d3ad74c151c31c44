"""Cleanup on every path: success, failure, timeout, the runner stopped or killed."""
import os
import signal
import subprocess
import time

from conftest import CELA, cela_cgroups, run, sandbox_pids, wait_until


def mounts_mentioning(word):
    return [l for l in open("/proc/self/mountinfo") if word in l]


def test_many_runs_leave_nothing():
    before = len(mounts_mentioning("cela"))
    for i in range(10):
        p = run(["sh", "-c", f"echo {i} > /tmp/x; sleep 0.01 & exit {i % 3}"])
        assert p.returncode == i % 3
    assert not sandbox_pids()
    assert not cela_cgroups()
    assert len(mounts_mentioning("cela")) == before == 0


def test_sigterm_to_runner_kills_the_sandbox_and_cleans_up(background):
    p = background(["sh", "-c", "sleep 1000 & sleep 1000"])
    assert wait_until(lambda: len(sandbox_pids()) >= 3, 10)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 128 + signal.SIGTERM
    assert "received SIGTERM" in p.stderr.read()
    assert wait_until(lambda: not sandbox_pids(), 5)
    assert not cela_cgroups()


def test_sigint_to_runner_kills_the_sandbox(background):
    p = background(["sleep", "1000"])
    assert wait_until(lambda: len(sandbox_pids()) >= 2, 10)
    p.send_signal(signal.SIGINT)
    assert p.wait(10) == 128 + signal.SIGINT
    assert not sandbox_pids()


def test_sigkill_of_runner_kills_sandbox_and_next_run_reclaims_its_cgroup(background):
    p = background(["sh", "-c", "sleep 1000 & sleep 1000"])
    assert wait_until(lambda: len(sandbox_pids()) >= 3, 10)
    p.kill()  # no chance to clean up
    p.wait(10)
    # init dies with its parent (PDEATHSIG) and takes the namespace with it ...
    assert wait_until(lambda: not sandbox_pids(), 5)
    # ... but the cgroup is left until the next runner sees its runner is gone.
    assert cela_cgroups(), "expected the killed runner's cgroup to remain until the next run"
    q = run(["true"])
    assert q.returncode == 0, q.stderr
    assert not cela_cgroups()


def test_failed_start_cleans_up():
    p = run(["/nonexistent/binary"])
    assert p.returncode == 127
    assert "command not found" in p.stderr
    p = run(["true"], opts=["--cwd", "/does/not/exist"])
    assert p.returncode == 125
    assert "chdir" in p.stderr
    assert not cela_cgroups()
