#!/usr/bin/python3
"""Many idle sessions on one private `cela serve`: what each costs and whether latency
stays flat. A benchmark, not a test: it asserts nothing.

    python3 bench/scale.py --cela build/cela [--sessions 5000] [--runs 50] [--template base]

At 0 live sessions: exec round trip of /bin/true (POST .../run, one keep-alive
connection) in a probe session and cold create p50. Then sessions are created at 8
concurrent clients up to --sessions, or until the daemon refuses one (the number
reached and its answer are recorded, not raised). At that count: memory per idle
session (MemAvailable drop / N, and the sessions' cgroup memory), daemon RSS and open
fds per idle session, and again the probe's exec round trip and cold create. Then
every session is deleted at 8 clients (timed) and what this daemon left is counted:
its sessions' cgroups, loop devices bound to images of its state dir, mounts naming
its state dir or a session, uid slot locks and sandbox processes it still holds.

The function `scale` is what bench/report.py runs for issue 13's figure (g) (and (b):
a callback at a chosen live count).
"""
import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import time

import harness  # noqa: E402  (a script's own directory is on sys.path)
from client import KeepAlive
from daemon import cold_create, create, create_many, delete_many, exec_roundtrip, session_body
from stats import pct

harness.integration_path()
import ownership  # noqa: E402

SLOT_DIR = "/run/cela/slots/"  # jail/userns.h kSlotLockDir
CGROUP_ROOT = "/sys/fs/cgroup"


def meminfo(key="MemAvailable"):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fd_targets(pid):
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def fd_kind(target):
    """A descriptor's target with its numbers and ids taken out: `socket`, `/dev/loop*`,
    `/sys/fs/cgroup/unified/cela/<s>`, `anon_inode:[pidfd]`..."""
    target = re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", target)
    target = re.sub(r"/s-[0-9a-f]+", "/<s>", target)
    target = re.sub(r"/#\d+ \(deleted\)$", "/<image> (deleted)", target)
    target = re.sub(r"/cela-test-[^/]+/", "/<test>/", target)
    return re.sub(r"\d+", "N", target) if target.startswith(("/dev/loop", "/run/cela/slots/")) else target


def fds_by_kind(pid):
    return collections.Counter(fd_kind(t) for t in fd_targets(pid))


def probe(pid):
    """The host's MemAvailable and the daemon's RSS and open descriptors, now."""
    return {"mem_available_bytes": meminfo(), "daemon_rss_bytes": rss_bytes(pid), "daemon_fds": len(fd_targets(pid))}


def children(pid):
    """Processes whose parent is `pid` (a daemon's sessions' inits)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def session_cgroups(ids):
    """Cgroup directories of these sessions left in any hierarchy."""
    ids = set(ids)
    return [str(p) for p in ownership.cela_cgroup_dirs("s-") if p.name in ids]


def state_loops(state_dir):
    """Loop devices bound to an image of this state dir (images are O_TMPFILEs there)."""
    out = []
    for path in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(path) as f:
                if f.read().startswith(state_dir + "/"):
                    out.append(path.split("/")[3])
        except OSError:
            pass
    return out


def mounts_naming(pids, state_dir, ids):
    """mountinfo lines of these processes (and ours) that name the state dir or a session."""
    ids = set(ids)
    found = set()
    for pid in ["self", *pids]:
        try:
            with open(f"/proc/{pid}/mountinfo") as f:
                for line in f:
                    if state_dir in line or any(part in ids for part in line.replace("/", " ").split()):
                        found.add(line.strip())
        except OSError:
            pass
    return sorted(found)


def ready_disks(d):
    """Disk layers the daemon's pool keeps ready while it runs (docs/operations.md
    "Storage"): not leftovers."""
    disk = (d.config or {}).get("disk", {})
    return disk.get("pool", 2) if disk.get("kind", "disk") == "disk" else 0


def leftovers(d, ids):
    """What the daemon `d` still holds of the sessions `ids` (all deleted or ended)."""
    running = not exited(d)
    pid = d.proc.pid
    loops = state_loops(d.state)
    out = {
        "cgroups": len(session_cgroups(ids)),
        "loop_devices": max(0, len(loops) - (ready_disks(d) if running else 0)),
        "mounts": len(mounts_naming([pid] if running else [], d.state, ids)),
        "uid_slot_locks": sum(t.startswith(SLOT_DIR) for t in fd_targets(pid)) if running else 0,
        "processes": len(children(pid)) if running else 0,
    }
    out["none"] = not any(out.values())
    return out


def exited(d):
    """Whether the daemon is gone or going: reaped, dying (a process that is still
    freeing a thousand disk layers in its exit is neither reaped nor a zombie for
    minutes), or no longer accepting connections."""
    if d.proc.poll() is not None:
        return True
    try:
        with open(f"/proc/{d.proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        if _fatal_pending(d.proc.pid):
            return True
    except OSError:
        return True
    try:
        d.request("GET", "/healthz", timeout=10)
        return False  # any answer (a 503 at the descriptor limit too) is a live daemon
    except TimeoutError:
        return False  # busy, not gone
    except OSError:
        return True


def _fatal_pending(pid):
    """A SIGKILL queued for the process (it is on its way out)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & (1 << 8):
                return True
    return False


def daemon_error(d):
    """Why the daemon is gone (its exit status and last log lines), or None if it runs."""
    if not exited(d):
        return None
    lines = [line for line in d.logs().strip().splitlines() if '"msg":"access"' not in line]
    fatal = [line.strip() for line in lines if line.startswith(("terminate called", "  what()")) or "fatal" in line]
    status = d.proc.poll()
    return f"daemon exited ({'status ' + str(status) if status is not None else 'exiting'}): " + \
        " | ".join((fatal or lines)[-2:])


def costs(pid, base, kinds_0, ids):
    """What the live sessions `ids` (and the probe session) cost, against `base`, the
    probe() at 0 live, and kinds_0, the daemon's fds_by_kind() then."""
    live = len(ids) + 1
    at = probe(pid)
    grown = fds_by_kind(pid)
    grown.subtract(kinds_0)
    cg = []
    for s in ids:
        try:
            with open(f"{CGROUP_ROOT}/memory/cela/{s}/memory.usage_in_bytes") as f:
                cg.append(int(f.read()))
        except OSError:
            pass
    return {"live": live, **at,
            "memory_per_session_bytes": (base["mem_available_bytes"] - at["mem_available_bytes"]) / live,
            "daemon_fds_per_session": (at["daemon_fds"] - base["daemon_fds"]) / live,
            "daemon_fds_per_session_by_kind": {k: round(v / live, 2) for k, v in grown.most_common() if v > 0},
            "cgroup_memory_per_session_bytes": sum(cg) / len(cg) if cg else None}


def nofile_hard(pid):
    """The hard RLIMIT_NOFILE of process `pid`."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[4])
    raise KeyError("Max open files")


def fd_cap(pid, cost, margin=0.9):
    """The live count at which the daemon would have used `margin` of the descriptors
    it has left, at what a session has cost so far (None before any was measured)."""
    per = cost.get("daemon_fds_per_session") or 0
    if per <= 0:
        return None
    room = (nofile_hard(pid) - cost["daemon_fds"]) / per
    return cost["live"] + int(room * margin)


def scale(d, n, runs, body, clients=8, hooks=None, settle_s=2.0, step=500):
    """Figure (g) on the started daemon `d`. hooks: {live count: fn(live count)} run
    once the ramp reaches that count (fn's result lands in the figure under "hooks").

    The latencies at N are measured at n live, or short of the descriptor limit (90% of
    what the daemon has left, from what a session cost so far: running out crashes
    today's daemon), and those sessions deleted (timed); when that was short of n, a
    second ramp from none goes on to n, so the figure also says how far the daemon gets
    and what stops it."""
    hooks = dict(hooks or {})
    c = KeepAlive(d.socket)
    pid = d.proc.pid
    fig = {"target_sessions": n, "runs": runs, "clients": clients, "template": body["template"],
           "disk_kind": body.get("disk", {}).get("kind", "the daemon's default"), "hooks": {}}
    ids, probe_sid = [], None
    state = {"ramp_s": 0.0}

    def delete_all():
        """Deletes every live session at `clients` clients: the timed figure."""
        nonlocal probe_sid
        everything = ids + ([probe_sid] if probe_sid else [])
        seconds, error = delete_many(d.socket, everything, clients)
        fig["deleted"] = len(everything)
        fig["delete_all_s"] = seconds
        fig["delete_error"] = error
        time.sleep(1)
        fig["leftovers_after_delete"] = leftovers(d, d_session_ids(d))
        ids.clear()
        probe_sid = None

    def ramp_to(live):
        want = live - len(ids) - (1 if probe_sid else 0)  # the probe session is live too
        if want <= 0:
            return None
        got, seconds, error = create_many(d.socket, want, body, clients)
        ids.extend(got)
        state["ramp_s"] += seconds
        return error

    try:
        time.sleep(settle_s)  # the disk pool fills at start
        base = probe(pid)
        fig["at_0"] = base
        kinds_0 = fds_by_kind(pid)
        probe_sid = create(c, body)
        fig["exec_roundtrip_0_ms"] = exec_roundtrip(c, probe_sid, runs)
        fig["create_0_ms"] = cold_create(c, body, runs)["samples_ms"]

        # Stages: the hooks' counts and every `step` sessions, each ending with a look at
        # what the sessions cost so far (kept when the daemon dies at its limit).
        stops = sorted(set(k for k in hooks if 0 < k < n) | set(range(step, n, step))) + [n]
        error, cap = None, None
        for stop in stops:
            capped = cap is not None and stop > cap
            error = ramp_to(min(stop, cap) if capped else stop)
            if error:
                break
            fig["costs"] = costs(pid, base, kinds_0, ids)
            cap = fd_cap(pid, fig["costs"])
            if stop in hooks and not capped:
                fig["hooks"][str(stop)] = hooks[stop](len(ids) + 1)
            if capped:
                fig["capped_at"] = len(ids) + 1
                break
        time.sleep(settle_s)
        if daemon_error(d):
            fig["error"] = daemon_error(d)
            fig["stopped_by"] = error
            fig["reached"] = len(ids) + 1
            return fig
        fig["costs"] = costs(pid, base, kinds_0, ids)
        fig["measured_at"] = len(ids) + 1

        fig["exec_roundtrip_n_ms"] = exec_roundtrip(c, probe_sid, runs)
        if error and ids:
            # At the limit: make room for the create figure (one create at a time).
            for s in ids[-2:]:
                c.call("DELETE", f"/v1/sessions/{s}")
            del ids[-2:]
            fig["create_n_note"] = f"two sessions deleted first to make room: measured at {len(ids) + 1} live"
        try:
            fig["create_n_ms"] = cold_create(c, body, runs)["samples_ms"]
        except RuntimeError as exc:
            fig["create_n_error"] = str(exc)
        reached = len(ids) + 1
        delete_all()
        if not error and reached < n:
            # Then from none again on to the target, or to whatever stops the daemon first.
            error = ramp_to(n)
            reached = len(ids)
            time.sleep(settle_s)
            if daemon_error(d):
                fig["error"] = daemon_error(d)
        fig["reached"] = reached
        fig["stopped_by"] = error
    except (OSError, RuntimeError) as exc:
        fig["error"] = daemon_error(d) or f"{type(exc).__name__}: {exc}"
        fig.setdefault("reached", len(ids) + 1)
    finally:
        fig["ramp_create_per_s"] = len(ids) / state["ramp_s"] if state["ramp_s"] else None
        if not exited(d) and (ids or probe_sid):
            if "delete_all_s" in fig:  # the second ramp's sessions: deleted, not timed again
                delete_many(d.socket, ids + ([probe_sid] if probe_sid else []), clients)
                time.sleep(1)
                fig["leftovers_after_delete"] = leftovers(d, d_session_ids(d))
            else:
                delete_all()
        c.close()
    return fig


def d_session_ids(d):
    """Every session id this daemon's state database lists."""
    ownership.remember_sessions(d.state)
    return ownership.own_session_ids()


def finish(d, fig, ids_hint=(), release_s=180, keep_log=None):
    """Stops `d` and records what is left after the stop. A daemon that died is waited
    for and started once more on its state dir, so its recovery removes what its
    sessions left (cgroups, loop devices), before the state dir goes."""
    ids = d_session_ids(d) | set(ids_hint)
    if exited(d):
        fig["crashed"] = daemon_error(d)
        t0 = time.monotonic()
        try:
            d.proc.wait(900)
        except subprocess.TimeoutExpired:
            d.proc.kill()
            d.proc.wait()
        fig["crashed_exit_s"] = time.monotonic() - t0
        fig["leftovers_after_crash"] = leftovers(d, ids)
        t0 = time.monotonic()
        try:
            d.start()
        except RuntimeError:
            # Recovery of many sessions outlasts the harness's 60 s: wait for it.
            while d.proc.poll() is None and time.monotonic() - t0 < 900:
                try:
                    if d.request("GET", "/healthz")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
        fig["restarted_for_recovery"] = True
        fig["recovery_s"] = time.monotonic() - t0
    d.stop()
    # The kernel lets go of loop devices whose last holder was a dead sandbox's mount
    # namespace in the background (a minute for 1,500 after a crash here): wait for it,
    # and say what was there at first and how long it took. keep_log: where to copy the
    # daemon's log before its directory goes.
    t0 = time.monotonic()
    left = first = leftovers(d, ids)
    while left["loop_devices"] and time.monotonic() - t0 < release_s:
        time.sleep(1)
        left = leftovers(d, ids)
    if not first["none"]:
        fig["leftovers_at_stop"] = first
        fig["leftovers_released_s"] = time.monotonic() - t0
    fig["leftovers_after_stop"] = left
    if keep_log:
        d.log.flush()
        shutil.copyfile(d.log.name, keep_log)
        fig["daemon_log"] = keep_log
    d.close()


def summarize(fig):
    """p50s and ratios of figure (g) from its samples."""
    out = {k: fig.get(k) for k in ("runs", "reached", "measured_at", "capped_at", "target_sessions", "stopped_by",
                                   "ramp_create_per_s",
                                   "delete_all_s", "deleted", "delete_error", "leftovers_after_delete",
                                   "leftovers_after_crash", "leftovers_at_stop", "leftovers_released_s",
                                   "leftovers_after_stop", "daemon_log", "error", "crashed",
                                   "crashed_exit_s", "recovery_s", "create_n_error", "create_n_note")}
    # The costs at the end, or at the last stage before the daemon died.
    c = fig.get("costs") or {}
    out.update({k: c.get(k) for k in ("memory_per_session_bytes", "cgroup_memory_per_session_bytes",
                                      "daemon_fds_per_session", "daemon_fds_per_session_by_kind")})
    out["costs_at"] = c.get("live")
    out["daemon_rss_at_n_bytes"] = c.get("daemon_rss_bytes")
    for name in ("exec_roundtrip", "create"):
        zero, at_n = fig.get(f"{name}_0_ms"), fig.get(f"{name}_n_ms")
        out[f"{name}_0_p50_ms"] = pct(zero, .5) if zero else None
        out[f"{name}_n_p50_ms"] = pct(at_n, .5) if at_n else None
        out[f"{name}_ratio"] = out[f"{name}_n_p50_ms"] / out[f"{name}_0_p50_ms"] if zero and at_n else None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--template", default="base")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--disk", choices=("disk", "memory"), help="the sessions' disk.kind (default: the daemon's)")
    ap.add_argument("--json", default="bench/results/scale.json")
    a = ap.parse_args()
    Daemon = harness.daemon_util(a.cela).Daemon
    d = Daemon(harness.many_sessions_config(a.sessions)).start()
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    fig = {}
    try:
        body = session_body(a.template, **({"disk": {"kind": a.disk}} if a.disk else {}))
        fig = scale(d, a.sessions, a.runs, body, a.clients)
    finally:
        finish(d, fig, keep_log=os.path.splitext(a.json)[0] + "-daemon.log")
    s = summarize(fig)
    for k, v in s.items():
        print(f"{k:<34} {v}")
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump({"summary": s, "raw": fig}, fh, indent=1)
    print(f"raw figures: {a.json}")


if __name__ == "__main__":
    main()
