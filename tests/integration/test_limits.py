"""Resource limits: each is enforced by the kernel and named in the result."""
import pytest
import time

from conftest import run_json, runner_kind, sandbox_pids, wait_until

# Every test runs with `cela run` and again in a daemon session (conftest.runner).
pytestmark = pytest.mark.usefixtures("runner")


def test_memory_limit_oom_kills_and_says_so():
    r, out, p = run_json(["python3", "-c", "b = bytearray(400 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"],
                         opts=["--memory", "64m"])
    assert r["state"] == "oom_killed", r
    assert "memory limit 64 MiB" in r["reason"]
    assert p.returncode == 121
    assert r["peak_memory_bytes"] > 32 * 1024 * 1024


def test_fork_bomb_is_contained_by_pids_limit():
    bomb = ("import os, time\nkids = 0\nfor i in range(500):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(5); os._exit(0)\n        kids += 1\n    except OSError as e:\n"
            "        print('fork failed', e.errno); break\nprint('kids', kids)")
    r, out, p = run_json(["python3", "-c", bomb], opts=["--pids", "32"])
    assert r["state"] == "exited", r
    assert "fork failed 11" in out  # EAGAIN
    assert r.get("pids_peak", 0) <= 32  # exec records keep pids in the session metrics
    assert "pids limit 32 reached" in r["reason"], r


def test_cpu_quota_throttles():
    spin = "import time\nend = time.monotonic() + 2\nwhile time.monotonic() < end: pass"
    r, _, _ = run_json(["python3", "-c", spin], opts=["--cpus", "0.25"])
    assert r["state"] == "exited", r
    # 2 s of wall time at a 0.25 CPU ceiling: about 500 ms of CPU, never near 2000.
    assert 250 <= r["cpu_ms"] <= 900, r


def test_timeout_kills_double_forked_setsid_children():
    # A grandchild that daemonizes (fork, setsid, fork) must not survive the timeout.
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(1000)\n    os._exit(0)\ntime.sleep(1000)")
    t0 = time.monotonic()
    r, _, p = run_json(["python3", "-c", code], opts=["--timeout", "1s"])
    elapsed = time.monotonic() - t0
    assert r["state"] == "timed_out", r
    assert "timeout of 1 s" in r["reason"]
    assert p.returncode == 124
    assert elapsed < 10
    assert not sandbox_pids()


def test_main_exit_ends_background_children():
    r, _, _ = run_json(["sh", "-c", "(setsid sleep 1000 &) ; exit 3"])
    assert r["state"] == "exited" and r["exit_code"] == 3, r
    assert wait_until(lambda: not sandbox_pids(), 5)


def test_disk_limit_gives_enospc():
    code = ("import errno\ntry:\n    with open('/tmp/big', 'wb') as f:\n        for i in range(100): f.write(b'x' * (1 << 20))\n"
            "    print('wrote all')\nexcept OSError as e:\n    print('errno', e.errno)")
    r, out, _ = run_json(["python3", "-c", code], opts=["--disk", "16m", "--memory", "256m"])
    assert r["state"] == "exited", r
    assert out.strip().splitlines()[-1] in ("errno 28", "errno 27"), out  # ENOSPC or EFBIG


def test_fsize_rlimit_caps_a_single_file():
    code = ("import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE)[0])\n"
            "print(resource.getrlimit(resource.RLIMIT_CORE)[1])")
    r, out, _ = run_json(["python3", "-c", code], opts=["--disk", "8m"])
    assert out.split() == [str(8 << 20), "0"], out


def test_result_reports_cpu_memory_and_pids():
    r, _, _ = run_json(["python3", "-c", "x = bytearray(20 << 20); s = sum(range(3_000_000))"])
    assert r["state"] == "exited" and r["exit_code"] == 0
    assert r["cpu_ms"] > 0
    assert r["peak_memory_bytes"] >= 20 << 20
    # Both runners count the exec's own cgroup (python alone, not init).
    assert r["pids_peak"] >= 1, r
    assert r["duration_ms"] > 0
