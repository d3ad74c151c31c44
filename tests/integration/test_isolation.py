"""Escape attempts from inside a sandbox: each must fail (docs/security.md)."""
import json
import socket
import subprocess
import threading

import pytest

from conftest import py, run

# Every test runs with `cela run` and again in a daemon session (conftest.runner).
pytestmark = pytest.mark.usefixtures("runner")

# A probe that tries a syscall through ctypes and prints errno (0 = it worked).
SYSCALL_PROBE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
results = {}
buf = ctypes.create_string_buffer(b"/tmp")
results["mount"] = sc(165, ctypes.addressof(ctypes.create_string_buffer(b"none")), ctypes.addressof(buf), ctypes.addressof(ctypes.create_string_buffer(b"tmpfs")), 0, 0)
results["umount2"] = sc(166, ctypes.addressof(ctypes.create_string_buffer(b"/proc")), 2)
results["unshare_user"] = sc(272, 0x10000000)
results["unshare_net"] = sc(272, 0x40000000)
results["setns"] = sc(308, 0, 0)
results["keyctl"] = sc(250, 0, 0, 0, 0, 0)
results["add_key"] = sc(248, 0, 0, 0, 0, 0)
results["bpf"] = sc(321, 0, 0, 0)
results["perf_event_open"] = sc(298, 0, 0, -1, -1, 0)
results["ptrace_attach_1"] = sc(101, 16, 1, 0, 0)
results["init_module"] = sc(175, 0, 0, 0)
results["kexec_load"] = sc(246, 0, 0, 0, 0)
results["userfaultfd"] = sc(323, 0)
results["io_uring_setup"] = sc(425, 1, 0)
results["open_by_handle_at"] = sc(304, 0, 0, 0)
results["pivot_root"] = sc(155, 0, 0)
results["reboot"] = sc(169, 0xfee1dead, 672274793, 0x1234567, 0)
results["syslog"] = sc(103, 3, 0, 0)
results["clock_settime"] = sc(227, 0, 0)
results["swapon"] = sc(167, 0, 0)
results["clone_newns"] = sc(56, 0x00020000 | 17, 0, 0, 0, 0)
results["clone3"] = sc(435, 0, 0)
results["socket_packet"] = sc(41, 17, 3, 0)
results["socket_vsock"] = sc(41, 40, 1, 0)
results["socket_netlink_audit"] = sc(41, 16, 3, 9)
results["iopl"] = sc(172, 3)
results["acct"] = sc(163, 0)
print(json.dumps(results))
"""


@pytest.mark.parametrize("user", ["user", "root"])
def test_dangerous_syscalls_are_denied(user):
    p = py(SYSCALL_PROBE, opts=["--user", user])
    assert p.returncode == 0, p.stderr
    results = json.loads(p.stdout)
    worked = {k: v for k, v in results.items() if v == 0}
    assert not worked, f"these succeeded inside the sandbox: {worked}"
    assert results["clone3"] == 38  # ENOSYS: glibc falls back to clone


def test_threads_and_subprocesses_still_work():
    p = py("import threading,subprocess; t=threading.Thread(target=print,args=('t',)); t.start(); t.join();"
           "print(subprocess.run(['echo','sub'],capture_output=True,text=True).stdout.strip())")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["t", "sub"]


def test_pid_namespace_hides_host_processes():
    p = run(["sh", "-c", "ls /proc | grep -c '^[0-9]'; cat /proc/1/comm"])
    lines = p.stdout.split()
    assert int(lines[0]) <= 5, p.stdout  # init, sh, ls, grep (+ cat)
    assert lines[1] == "cela-init"


def test_hostname_is_per_sandbox():
    p = run(["hostname"])
    assert p.stdout.strip().startswith("cela-")
    assert p.stdout.strip() != socket.gethostname()


def test_host_files_are_not_visible():
    p = run(["sh", "-c", "for f in /etc/shadow /root/.bashrc /work /var/lib/cela /run/cela /sys/kernel "
                         "/etc/resolv.conf /home/user/../../work; do test -e $f && echo VISIBLE $f; done; true"],
            opts=["--user", "root"])
    assert p.returncode == 0, p.stderr
    assert "VISIBLE" not in p.stdout, p.stdout


def test_template_is_read_only_even_for_root():
    p = run(["sh", "-c", "echo x > /usr/bin/cela-probe; echo rc=$?"], opts=["--user", "root"])
    assert "rc=0" not in p.stdout
    assert "Read-only file system" in p.stderr


def test_proc_is_masked_and_read_only():
    # Masked files are absent on this kernel or read as empty (/dev/null bound over them).
    code = r"""
import os
for f in ["kcore", "keys", "timer_list", "sched_debug", "kallsyms", "kmsg", "sysrq-trigger", "slabinfo"]:
    p = "/proc/" + f
    if os.path.exists(p):
        with open(p, "rb") as fh:
            print(f, len(fh.read(4096)))
for f in ["/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"]:
    try:
        with open(f, "w") as fh:
            fh.write("1")
        print("WROTE", f)
    except OSError as e:
        print("denied", f, e.errno)
"""
    p = py(code, opts=["--user", "root"])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    sizes = [l for l in lines if not l.startswith(("denied", "WROTE"))]
    assert sizes and all(l.endswith(" 0") for l in sizes), lines
    assert not [l for l in lines if l.startswith("WROTE")], lines


def test_dev_is_minimal():
    p = run(["sh", "-c", "ls -A /dev | sort | tr '\\n' ' '; echo > /dev/newfile; echo rc=$?"],
            opts=["--user", "root"])
    names = set(p.stdout.split("rc=")[0].split())
    assert names == {"null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "ptmx", "fd",
                     "stdin", "stdout", "stderr"}, names
    assert "rc=0" not in p.stdout


def test_tmp_and_home_are_writable():
    p = run(["sh", "-c", "echo a > /tmp/a && echo b > /home/user/b && cat /tmp/a /home/user/b"])
    assert p.stdout.split() == ["a", "b"], p.stderr


def test_network_has_only_loopback_and_no_dns():
    code = r"""
import os, socket
print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'nosys')
ifs = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
print(sorted(ifs))
try:
    socket.getaddrinfo('localhost.invalid-cela-test', 80); print('dns ok')
except Exception as e: print('dns fail')
s = socket.socket(); s.settimeout(2)
try:
    s.connect(('10.0.2.2', 80)); print('route ok')
except OSError as e: print('route errno', e.errno)
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); print('loopback ok')
"""
    p = py(code)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1] == "['lo']", lines
    assert lines[2] == "dns fail"
    assert lines[3] == "route errno 101"  # ENETUNREACH
    assert lines[4] == "loopback ok"


def test_host_loopback_services_are_unreachable():
    # A server on the host's loopback: the sandbox's 127.0.0.1 is its own.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True)
    t.start()
    p = py(f"import socket\ntry:\n socket.create_connection(('127.0.0.1',{port}),timeout=2); print('connected')\n"
           f"except OSError as e: print('refused', e.errno)")
    srv.close()
    assert p.stdout.strip() == "refused 111", p.stdout + p.stderr
    assert not accepted


def test_tiocsti_injection_is_denied():
    code = ("import fcntl, termios, os, pty\nm, s = pty.openpty()\n"
            "try:\n fcntl.ioctl(s, termios.TIOCSTI, b'x'); print('injected')\n"
            "except OSError as e: print('denied', e.errno)")
    p = py(code)
    assert p.stdout.strip() == "denied 1", p.stdout + p.stderr


def test_no_fds_leak_into_the_sandbox():
    p = run(["sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '"])
    # 0,1,2 and the fd ls opens for the directory listing
    assert p.stdout.split() in (["0", "1", "2", "3"], ["0", "1", "2"]), p.stdout


def test_each_exec_leads_its_own_session():
    p = py("import os; print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid())")
    assert p.stdout.split() == ["True", "True"], p.stdout + p.stderr
