"""The real base template (Debian 12): tools, sudo semantics, throwaway writes.

`make test` builds the template before ctest runs; a missing template is a failure
here, not a skip."""
import json

import pytest

from conftest import UID_BASE, base_available, run, run_json, sandbox_pids, wait_until
from test_isolation import SYSCALL_PROBE


@pytest.fixture(scope="module", autouse=True)
def require_base():
    assert base_available(), "base template missing: run `build/cela template build base` (make test does)"


def test_tools_are_there_and_run_as_user():
    p = run(["sh", "-c", "id -un; python3 -c 'print(6*7)'; node -e 'console.log(6*7)'; npm --version >/dev/null "
                         "&& echo npm; git --version >/dev/null && echo git; curl --version >/dev/null && echo curl;"
                         " ps -o comm= -p 1"], template="base")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["user", "42", "42", "npm", "git", "curl", "cela-init"]


def test_python_venv_and_pip_work_offline_as_far_as_they_can():
    p = run(["sh", "-c", "python3 -m venv /tmp/v && /tmp/v/bin/python -c 'import sys; print(sys.prefix)' && "
                         "/tmp/v/bin/pip --version >/dev/null && echo pip-ok"], template="base", timeout=180)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["/tmp/v", "pip-ok"]


def test_sudo_reaches_only_namespace_root(background):
    p = run(["sh", "-c", "sudo -n id -u"], template="base")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0"
    # Root reached through sudo is still jailed: same seccomp, same bounding set.
    p = run(["sudo", "-n", "python3", "-c", SYSCALL_PROBE], template="base")
    assert p.returncode == 0, p.stderr
    worked = {k: v for k, v in json.loads(p.stdout).items() if v == 0}
    assert not worked, worked
    # And from the host it is an unprivileged uid.
    bg = background(["sudo", "-n", "sleep", "30"], template="base")
    assert wait_until(lambda: len(sandbox_pids()) >= 3, 10)
    for pid in sandbox_pids():
        uid = int(open(f"/proc/{pid}/status").read().split("Uid:")[1].split()[1])
        assert uid >= UID_BASE
    bg.terminate()
    bg.wait(10)


def test_no_allow_sudo_keeps_no_new_privs():
    p = run(["sudo", "-n", "id", "-u"], template="base", opts=["--no-allow-sudo"])
    assert p.returncode != 0
    assert "no new privileges" in p.stderr


def test_writes_do_not_persist_between_runs():
    assert run(["sh", "-c", "echo hi > /home/user/marker && sudo -n touch /etc/marker"], template="base").returncode == 0
    p = run(["sh", "-c", "ls /home/user/marker /etc/marker 2>&1; true"], template="base")
    assert "No such file" in p.stdout and p.stdout.count("No such file") == 2, p.stdout


def test_no_network_for_package_installs():
    r, out, _ = run_json(["sh", "-c", "curl -sS -m 5 http://198.51.100.1/ ; echo rc=$?"], template="base")
    assert "rc=0" not in out
    assert "rc=7" in out  # couldn't connect: no route in an empty netns
