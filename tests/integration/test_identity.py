"""Who sandbox code runs as, seen from inside and from the host."""
import pytest
import re
import time
from pathlib import Path

from conftest import UID_BASE, run, py, sandbox_pids, wait_until

# Every test runs with `cela run` and again in a daemon session (conftest.runner).
pytestmark = pytest.mark.usefixtures("runner")


def status_of(pid):
    return Path(f"/proc/{pid}/status").read_text()


def field(status, name):
    return re.search(rf"^{name}:\s+(.*)$", status, re.M).group(1).split()


def test_default_user_is_uid_1000_with_home():
    p = run(["sh", "-c", "id -u; id -g; echo $HOME; echo $USER; pwd"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1000", "1000", "/home/user", "user", "/home/user"]


def test_root_is_namespace_root():
    p = run(["sh", "-c", "id -u; echo $HOME"], opts=["--user", "root"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "/root"]


def test_environment_is_clean():
    p = run(["env"], opts=["--env", "FOO=bar"])
    keys = sorted(line.split("=", 1)[0] for line in p.stdout.splitlines())
    assert keys == ["FOO", "HOME", "LANG", "LOGNAME", "PATH", "TERM", "USER"]


def test_user_has_no_capabilities_inside():
    p = run(["sh", "-c", "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status"])
    for line in p.stdout.splitlines():
        assert line.split()[1] == "0000000000000000", line


def test_root_bounding_set_lacks_dangerous_caps():
    p = run(["sh", "-c", "grep CapBnd /proc/self/status"], opts=["--user", "root"])
    mask = int(p.stdout.split()[1], 16)
    for cap in (21, 16, 19, 12, 13, 27, 22, 25, 39, 38, 17, 2):  # SYS_ADMIN MODULE PTRACE NET_ADMIN NET_RAW MKNOD BOOT TIME BPF PERFMON RAWIO DAC_READ_SEARCH
        assert not mask & (1 << cap), f"cap {cap} in bounding set"


def test_template_files_appear_root_owned():
    p = run(["stat", "-c", "%u:%g", "/usr/bin/env", "/etc/passwd"])
    assert p.stdout.split() == ["0:0", "0:0"], p.stderr


def test_no_sandbox_process_has_host_root_or_host_caps(background):
    sleeper = background(["sh", "-c", "sleep 30 & sleep 30"], opts=["--user", "root"])
    assert wait_until(lambda: len(sandbox_pids()) >= 3, 10)
    host_userns = Path("/proc/self/ns/user").resolve()
    for pid in sandbox_pids():
        st = status_of(pid)
        uids = [int(x) for x in field(st, "Uid")]
        gids = [int(x) for x in field(st, "Gid")]
        assert all(u >= UID_BASE for u in uids), (pid, uids)
        assert all(g >= UID_BASE for g in gids), (pid, gids)
        # Capabilities count only inside the process's own user namespace, which
        # must not be the host's.
        assert Path(f"/proc/{pid}/ns/user").resolve() != host_userns
    sleeper.terminate()
    sleeper.wait(10)


def test_concurrent_sandboxes_get_distinct_uid_ranges(background):
    a = background(["sleep", "30"])
    b = background(["sleep", "30"])
    assert wait_until(lambda: len(sandbox_pids()) >= 4, 10)  # 2 x (init + sleep)
    ranges = {int(field(status_of(p), "Uid")[1]) // 65536 for p in sandbox_pids()}
    assert len(ranges) == 2, ranges
    for p in (a, b):
        p.terminate()
        p.wait(10)


def test_files_written_inside_land_on_a_sandbox_uid(background):
    p = background(["sh", "-c", "echo hi > /home/user/f && sleep 30"])
    def written():
        for pid in sandbox_pids():
            f = Path(f"/proc/{pid}/root/home/user/f")
            try:
                return f.stat().st_uid
            except OSError:
                continue
        return None
    assert wait_until(lambda: written() is not None, 10)
    assert written() >= UID_BASE + 1000
    p.terminate()
    p.wait(10)


def test_sudo_on_host_template_is_not_available():
    # The host template ships no sudo promise: no_new_privs stays on.
    p = run(["sh", "-c", "grep NoNewPrivs /proc/self/status"])
    assert p.stdout.split()[1] == "1"


def test_signals_start_at_their_defaults():
    # The daemon ignores SIGPIPE (and its parent shell may ignore SIGINT/SIGQUIT);
    # execve keeps ignored signals ignored, so an exec must start from defaults.
    p = run(["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status; yes | head -c 1 >/dev/null"])
    assert p.returncode == 0, p.stderr
    assert "SigIgn:\t0000000000000000" in p.stdout, p.stdout
    assert "SigBlk:\t0000000000000000" in p.stdout, p.stdout
    assert "Broken pipe" not in p.stderr, p.stderr
