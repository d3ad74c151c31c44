"""Checks of the benchmark harness itself (not of cela's speed: nothing here is timed).
Needs root and a built cela, like the integration tests:

    /usr/bin/python3 -m pytest -q -p no:cacheprovider bench/test_bench.py

They make sure the report measures what it says: one kept-alive connection, a
leftover count that does see what a live session holds, a dead daemon's cleanup, the
seccomp cache's file names as cela writes them, and the met/not-met column."""
import os
import shutil
import tempfile

import pytest

import harness
import report
import scale
import seccomp_cache
from client import KeepAlive
from daemon import create, session_body
from spawn import cela_run_argv, spawn_wait

CELA = os.environ.get("CELA_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "cela"))
Daemon = harness.daemon_util(CELA).Daemon

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cela serve, cela run)")


@pytest.fixture
def daemon():
    d = Daemon(harness.many_sessions_config(8)).start()
    fig = {}
    try:
        yield d
    finally:
        scale.finish(d, fig)
        assert fig["leftovers_after_stop"]["none"], fig


def test_keepalive_client_sends_every_request_on_one_connection(daemon):
    c = KeepAlive(daemon.socket)
    try:
        for _ in range(20):
            assert c.call("GET", "/healthz")[0] == 200
        sid = create(c, session_body("host"))
        for _ in range(5):
            assert c.call("POST", f"/v1/sessions/{sid}/run", {"argv": ["/bin/true"]})[0] == 200
        assert c.call("DELETE", f"/v1/sessions/{sid}")[0] == 200
        assert c.connects == 1
    finally:
        c.close()


def test_leftovers_count_what_a_live_session_holds_and_nothing_once_deleted(daemon):
    c = KeepAlive(daemon.socket)
    try:
        sid = create(c, session_body("host"))
        live = scale.leftovers(daemon, {sid})
        assert live["cgroups"] > 0 and live["uid_slot_locks"] == 1 and live["processes"] == 1, live
        assert not live["none"]
        assert c.call("DELETE", f"/v1/sessions/{sid}")[0] == 200
        assert scale.leftovers(daemon, {sid})["none"]
    finally:
        c.close()


def test_a_killed_daemon_is_seen_as_dead_and_its_recovery_removes_what_it_left():
    d = Daemon(harness.many_sessions_config(8)).start()
    fig = {}
    try:
        c = KeepAlive(d.socket)
        sid = create(c, session_body("host"))
        c.close()
        assert not scale.exited(d)
        d.proc.kill()
        d.proc.wait()
        assert scale.exited(d)
    finally:
        scale.finish(d, fig)
    assert fig["restarted_for_recovery"]
    assert fig["leftovers_after_crash"]["cgroups"] > 0, fig
    assert fig["leftovers_after_stop"]["none"], fig
    assert not scale.session_cgroups({sid})


def test_seccomp_program_path_is_the_file_cela_writes():
    tmp = tempfile.mkdtemp(prefix="cela-bench-test-")
    copy = os.path.join(tmp, "cela")
    try:
        shutil.copy2(CELA, copy)
        path = seccomp_cache.program_path(copy)
        assert not os.path.exists(path)
        spawn_wait(cela_run_argv(copy))
        assert os.path.exists(path), sorted(seccomp_cache.programs())
    finally:
        if os.path.exists(copy):
            try:
                os.unlink(seccomp_cache.program_path(copy))
            except FileNotFoundError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def test_seccomp_runs_are_classified_from_the_cache_dir():
    own, other = "seccomp-own.bpf", "seccomp-other.bpf"
    assert seccomp_cache.classify(own, other, {own: (1, 1)}, {own: (1, 1)}) == ("hit", False, 0)
    assert seccomp_cache.classify(own, other, {own: (1, 1)}, {own: (1, 9)}) == ("hit", False, 0)  # touched
    assert seccomp_cache.classify(own, other, {other: (2, 2)}, {own: (3, 3)}) == ("miss", True, 0)
    assert seccomp_cache.classify(own, other, {own: (1, 1)}, {own: (4, 4), other: (2, 2)}) == ("miss", False, 0)
    assert seccomp_cache.classify(own, other, {}, {"seccomp-x.bpf": (5, 5)}) == ("miss", False, 1)
    assert seccomp_cache.classify(own, other, {}, {}) == ("unknown", False, 0)


def test_met_column_follows_the_target_direction_and_ratio():
    assert report.figure("c", "x", "cmd", 1, 1.2, "ms", 1.5)["met"] is True
    assert report.figure("c", "x", "cmd", 1, 1.6, "ms", 1.5)["met"] is False
    assert report.figure("f", "x", "cmd", 1, 299, "/s", 300, better="higher")["met"] is False
    assert report.figure("a", "x", "cmd", 1, 9.0, "ms", 1.0, ratio=0.9, ratio_of="cela / bwrap")["met"] is True
    assert report.figure("a", "x", "cmd", 1, 0.5, "ms", 1.0, ratio=2.0, ratio_of="cela / bwrap")["met"] is False
    assert report.figure("a", "x", "cmd", 1, 0.5, "ms", None)["met"] is None
    rows = [report.figure("c", "round trip", "POST a|b", 3, 2.0, "ms", 1.5),
            report.skipped("a", "docker", "docker run", "not installed")]
    md = report.markdown({"meta": {"date": "d", "cela": "c", "commit": "x", "kernel": "k", "cpus": 2,
                                   "mem_total_mib": 1, "seconds": 1.0, "load_1min": [0.5, 0.7]}, "figures": rows})
    assert "| c | round trip | `POST a\\|b` | 3 | 2.00 ms |" in md and "**no**" in md
    assert "skipped: not installed" in md


def test_g_rows_render_from_a_run_that_measured_nothing_or_everything():
    assert report.scale_figures(scale.summarize({}), 10)[0]["value"] is None
    full = {"runs": 3, "reached": 10, "measured_at": 10, "target_sessions": 10, "deleted": 10, "delete_all_s": 1.0,
            "exec_roundtrip_0_ms": [1.0, 2.0], "exec_roundtrip_n_ms": [2.0, 3.0], "create_0_ms": [4.0],
            "create_n_ms": [5.0], "costs": {"live": 10, "memory_per_session_bytes": 2 ** 20, "daemon_rss_bytes": 2 ** 26,
                                             "daemon_fds_per_session": 3.0, "cgroup_memory_per_session_bytes": 1.0,
                                             "daemon_fds_per_session_by_kind": {"socket": 2.0}},
            "leftovers_after_delete": {"cgroups": 0, "none": True}, "leftovers_after_stop": {"cgroups": 1, "none": False},
            "daemon_log": "/tmp/x.log"}
    rows = {r["what"]: r for r in report.scale_figures(scale.summarize(full), 10)}
    assert rows["exec round trip p50 at 10 live"]["ratio"] == 2.5 / 1.5
    assert rows["memory per idle session"]["value"] == 1.0
    assert rows["left behind after stop"]["met"] is False and "/tmp/x.log" in rows["left behind after stop"]["note"]
