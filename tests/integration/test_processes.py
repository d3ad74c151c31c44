"""GET /v1/sessions/{id}/processes and POST …/processes/{pid}/signal (API.md "Processes,
terminals, ports"), against a real daemon: pids as the sandbox sees them, the exec each
process belongs to, signals through a pidfd, and what may not be signalled (init, the
host, another session, another tenant)."""
import os
import socket
import time

import pytest

from daemon_util import Daemon, wait_for

TEMPLATE = "base"


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


def start(d, sid, cmd, **extra):
    body = {"argv": cmd, **extra} if isinstance(cmd, list) else {"cmd": cmd, **extra}
    st, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs", body)
    assert st == 202, e
    return e["id"]


def wait_until(fn, timeout=15.0):
    return wait_for(fn, timeout)


def processes(d, sid, **kw):
    st, body, _ = d.request("GET", f"/v1/sessions/{sid}/processes", **kw)
    assert st == 200, body
    return body["processes"]


def by_marker(procs, marker):
    return [p for p in procs if marker in p["cmd"]]


def exec_record(d, sid, eid):
    st, rec, _ = d.request("GET", f"/v1/sessions/{sid}/execs/{eid}")
    assert st == 200, rec
    return rec


def test_two_execs_listed_with_their_exec_ids_and_inside_pids(daemon):
    sid = daemon.session(template=TEMPLATE)
    try:
        # Each exec: a shell whose child sleeps (a two-level tree per exec).
        e1 = start(daemon, sid, ["sh", "-c", "sleep 301; true"])
        e2 = start(daemon, sid, ["sh", "-c", "sleep 302; true"])
        procs = wait_until(lambda: (lambda p: p if any(x["cmd"] == "sleep 301" for x in p)
                                    and any(x["cmd"] == "sleep 302" for x in p) else None)(processes(daemon, sid)),
                           timeout=10)
        pids = {p["pid"]: p for p in procs}
        # init is pid 1 inside, belongs to no exec, and has no parent inside.
        assert pids[1]["exec_id"] is None and pids[1]["ppid"] == 0 and pids[1]["cmd"] == "cela-init", procs
        for eid, n in ((e1, "301"), (e2, "302")):
            sleeper = [p for p in procs if p["cmd"] == f"sleep {n}"]
            assert len(sleeper) == 1, procs
            sleeper = sleeper[0]
            shell = pids[sleeper["ppid"]]
            # The chain: sleep -> sh (the exec's main process) -> init, all with the exec's id.
            assert sleeper["exec_id"] == eid and shell["exec_id"] == eid, procs
            assert shell["ppid"] == 1 and shell["cmd"].startswith("sh -c"), procs
            assert sleeper["user"] == "user" and shell["user"] == "user", procs
            # Inside pids: small numbers of the sandbox's namespace, never host pids.
            assert sleeper["pid"] < 1000 and shell["pid"] < 1000, procs
            rec = exec_record(daemon, sid, eid)
            assert rec["pid"] == shell["pid"], (rec, procs)
        # No host process is listed: every pid is one the sandbox's /proc shows.
        r = daemon.run(sid, "ls /proc | grep -E '^[0-9]+$'")
        inside = {int(x) for x in r["stdout"].split()}
        assert set(pids) - inside <= set(), (sorted(pids), sorted(inside))
        # A root exec is shown as root.
        e3 = start(daemon, sid, ["sleep", "303"])
        start(daemon, sid, ["sleep", "304"], user="root")
        procs = wait_until(lambda: (lambda p: p if any(x["cmd"] == "sleep 304" for x in p) else None)(
            processes(daemon, sid)), timeout=10)
        assert [p["user"] for p in procs if p["cmd"] == "sleep 304"] == ["root"], procs
        assert [p["exec_id"] for p in procs if p["cmd"] == "sleep 303"] == [e3], procs
    finally:
        daemon.delete(sid)


def exec_cgroups(sid):
    """The session's per-exec cgroups (v1: in its memory hierarchy), name -> pids."""
    base = f"/sys/fs/cgroup/memory/cela/{sid}"
    if not os.path.isdir(base):
        base = f"/sys/fs/cgroup/cela/{sid}"
    out = {}
    for name in os.listdir(base):
        if os.path.isdir(os.path.join(base, name)):
            with open(os.path.join(base, name, "cgroup.procs")) as f:
                out[name] = f.read().split()
    return out


def test_exec_cgroups_are_made_ahead_and_removed_after_the_answer(daemon):
    sid = daemon.session(template=TEMPLATE)
    try:
        # An idle session holds none (each is a memory cgroup in the kernel).
        assert exec_cgroups(sid) == {}
        first = daemon.run(sid, "true")
        assert first["state"] == "exited", first
        # The ended exec's cgroup goes after its answer; one empty spare was made while
        # init started it, for the next exec.
        spare = wait_until(lambda: (lambda c: c if len(c) == 1 else None)(exec_cgroups(sid)), timeout=5)
        assert spare and list(spare.values()) == [[]], exec_cgroups(sid)
        name = next(iter(spare))
        # The next exec runs in that spare, is labelled with its own id, and its
        # accounting is its own (a fresh cgroup: one process at most).
        eid = start(daemon, sid, ["sleep", "305"])
        procs = wait_until(lambda: (lambda p: p if any(x["cmd"] == "sleep 305" for x in p) else None)(
            processes(daemon, sid)), timeout=10)
        assert [p["exec_id"] for p in procs if p["cmd"] == "sleep 305"] == [eid], procs
        assert len(exec_cgroups(sid).get(name, [])) == 1, exec_cgroups(sid)
        st, _, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        assert st in (200, 202), st
        rec = wait_until(lambda: (lambda r: r if r["state"] != "running" else None)(exec_record(daemon, sid, eid)))
        assert rec["pids_peak"] == 1, rec
        assert wait_until(lambda: name not in exec_cgroups(sid), timeout=5), exec_cgroups(sid)
    finally:
        daemon.delete(sid)
    assert not os.path.exists(f"/sys/fs/cgroup/memory/cela/{sid}")


def test_signal_term_ends_one_exec_and_its_record_shows_it(daemon):
    sid = daemon.session(template=TEMPLATE)
    try:
        e1 = start(daemon, sid, ["sleep", "311"])
        e2 = start(daemon, sid, ["sleep", "312"])
        procs = wait_until(lambda: (lambda p: p if len([x for x in p if x["cmd"].startswith("sleep 31")]) == 2
                                    else None)(processes(daemon, sid)), timeout=10)
        target = [p for p in procs if p["cmd"] == "sleep 311"][0]
        st, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/processes/{target['pid']}/signal",
                                     {"signal": "TERM"})
        assert st == 204, body
        rec = wait_until(lambda: (lambda r: r if r["state"] != "running" else None)(exec_record(daemon, sid, e1)),
                         timeout=10)
        assert rec["signal"] == 15, rec
        # The other exec runs on.
        assert exec_record(daemon, sid, e2)["state"] == "running"
        assert [p["cmd"] for p in processes(daemon, sid) if p["cmd"].startswith("sleep 31")] == ["sleep 312"]
        # A number works too, and STOP/CONT are signals like any other.
        other = [p for p in processes(daemon, sid) if p["cmd"] == "sleep 312"][0]
        for sig in ("STOP", "CONT", 9):
            st, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/processes/{other['pid']}/signal",
                                         {"signal": sig})
            assert st == 204, (sig, body)
        rec = wait_until(lambda: (lambda r: r if r["state"] != "running" else None)(exec_record(daemon, sid, e2)),
                         timeout=10)
        assert rec["signal"] == 9, rec
    finally:
        daemon.delete(sid)


def test_init_host_pid_and_another_sessions_pid_are_refused(daemon):
    a = daemon.session(template=TEMPLATE)
    b = daemon.session(template=TEMPLATE)
    try:
        start(daemon, a, ["sleep", "321"])
        start(daemon, b, ["sleep", "322"])
        pa = wait_until(lambda: [p for p in processes(daemon, a) if p["cmd"] == "sleep 321"], timeout=10)[0]
        pb = wait_until(lambda: [p for p in processes(daemon, b) if p["cmd"] == "sleep 322"], timeout=10)[0]
        # init: 403, and it lives on.
        st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/1/signal", {"signal": "KILL"})
        assert st == 403, body
        assert daemon.run(a, "echo alive")["stdout"] == "alive\n"
        # The daemon's own pid and a host process it started: not the session's.
        host = os.getpid()
        for pid in (host, daemon.proc.pid):
            st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/{pid}/signal", {"signal": "TERM"})
            assert st == 404, (pid, body)
        # b's sleeper, named by its pid inside b, signalled through a: 404 unless a has
        # a process of that very pid (then it is a's, never b's).
        a_pids = {p["pid"] for p in processes(daemon, a)}
        missing = max(a_pids | {pb["pid"]}) + 50
        st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/{missing}/signal", {"signal": "KILL"})
        assert st == 404, body
        # b's process by its HOST pid through a: 404 as well.
        host_pid = _host_pid_of(b, pb["pid"])
        if host_pid:
            st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/{host_pid}/signal",
                                         {"signal": "KILL"})
            assert st == 404 or host_pid in a_pids, body
        assert [p["cmd"] for p in processes(daemon, b) if p["cmd"] == "sleep 322"] == ["sleep 322"]
        # Bad bodies.
        st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/{pa['pid']}/signal", {"signal": "NOPE"})
        assert st == 400, body
        st, body, _ = daemon.request("POST", f"/v1/sessions/{a}/processes/{pa['pid']}/signal", {"signal": 99})
        assert st == 400, body
    finally:
        daemon.delete(a)
        daemon.delete(b)


def _host_pid_of(session_id, inside_pid):
    """The host pid of a process of `session_id` (via the host's /proc: NSpid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                if session_id not in f.read():
                    continue
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        ids = [int(x) for x in line.split()[1:]]
                        if len(ids) > 1 and ids[-1] == inside_pid:
                            return int(entry)
        except OSError:
            continue
    return None


def test_another_tenant_sees_nothing(daemon):
    sid = daemon.session(template=TEMPLATE)
    try:
        start(daemon, sid, ["sleep", "331"])
        p = wait_until(lambda: [x for x in processes(daemon, sid) if x["cmd"] == "sleep 331"], timeout=10)[0]
        st, t, _ = daemon.request("POST", "/v1/tenants", {"name": "other-procs"})
        assert st == 201, t
        st, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
        assert st == 201, k
        st, body, _ = daemon.request("GET", f"/v1/sessions/{sid}/processes", tcp=True, key=k["key"])
        assert st == 404, body
        st, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/processes/{p['pid']}/signal", {"signal": "KILL"},
                                     tcp=True, key=k["key"])
        assert st == 404, body
        assert [x["cmd"] for x in processes(daemon, sid) if x["cmd"] == "sleep 331"] == ["sleep 331"]
    finally:
        daemon.delete(sid)


def test_command_lines_are_redacted_like_exec_records(daemon):
    value = "procs-secret-5f4e3d2c1b"
    st, body, _ = daemon.request("PUT", "/v1/secrets/PROC_TOKEN", {"value": value})
    assert st == 201, body
    sid = daemon.session(template=TEMPLATE, secrets=[{"name": "PROC_TOKEN", "env": "PROC_TOKEN"}])
    try:
        start(daemon, sid, ["sh", "-c", 'exec python3 -c "import time; time.sleep(341)" "$PROC_TOKEN"'])
        procs = wait_until(lambda: (lambda p: p if any(x["cmd"].startswith("python3") for x in p) else None)(
            processes(daemon, sid)), timeout=10)
        shown = [x["cmd"] for x in procs if "sleep(341)" in x["cmd"]]
        assert shown and all(value not in c for c in shown), shown
        assert any("[REDACTED:PROC_TOKEN]" in c for c in shown), shown
    finally:
        daemon.delete(sid)


def test_upload_writer_in_the_sessions_cgroup_is_not_listed(daemon):
    """An upload's writer runs in the session's cgroups but in the host's pid namespace:
    it is never shown as a process of the session."""
    sid = daemon.session(template=TEMPLATE)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(daemon.socket)
        size = 8 << 20
        s.sendall(f"PUT /v1/sessions/{sid}/files?path=/tmp/big HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: {size}\r\n\r\n".encode() + b"x" * 65536)
        # The writer exists now (its first chunk went through): find it from the host.
        writers = wait_until(lambda: [pid for pid in _session_host_pids(sid) if _nspid_depth(pid) == 1], timeout=10)
        assert writers, "no upload writer in the session's cgroup"
        procs = processes(daemon, sid)
        inside = {int(x) for x in daemon.run(sid, "for p in /proc/[0-9]*; do echo ${p#/proc/}; done")["stdout"].split()}
        assert {p["pid"] for p in procs} <= inside, (procs, inside)
        for w in writers:
            assert w not in {p["pid"] for p in procs} or w in inside
            st, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/processes/{w}/signal", {"signal": "KILL"})
            assert st == 404 or w in inside, body
        assert all(os.path.exists(f"/proc/{w}") for w in writers)
    finally:
        s.close()
        daemon.delete(sid)


def _session_host_pids(session_id):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cgroup") as f:
                    if f"/{session_id}" in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _nspid_depth(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return len(line.split()) - 1
    except OSError:
        pass
    return 0
