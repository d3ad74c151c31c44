"""What this test run created, so that leftover checks count only our own: another
cela daemon (a developer's, staging) may run sandboxes on the same host.

A sandbox process is ours when one of its ancestors is a process a test started
(a daemon, `cela run`, a CLI client), or when it sits in the cgroup of a session one
of our daemons created (after a kill -9 its processes lose their parent)."""
import re
import sqlite3
from pathlib import Path

UID_BASE = 0x10000000  # jail/userns.h kUidBase
CGROUP_ROOT = Path("/sys/fs/cgroup")

_owner_pids = set()
_state_dirs = set()
_session_ids = set()


def register_process(pid):
    _owner_pids.add(int(pid))


def register_state_dir(path):
    _state_dirs.add(str(path))


def remember_sessions(state_dir):
    """Reads the session ids a daemon created (call before its state dir goes)."""
    db = Path(state_dir) / "cela.db"
    if not db.exists():
        return
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            _session_ids.update(r[0] for r in con.execute("SELECT id FROM sessions"))
            try:  # warm pools' sandboxes, not yet claimed (schema 5 on)
                _session_ids.update(r[0] for r in con.execute("SELECT id FROM pooled_sessions"))
            except sqlite3.OperationalError:
                pass
        finally:
            con.close()
    except sqlite3.Error:
        pass


def own_session_ids():
    for d in list(_state_dirs):
        remember_sessions(d)
    return set(_session_ids)


def _status(pid):
    try:
        return (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return ""


def _ppid(pid):
    m = re.search(r"^PPid:\s+(\d+)", _status(pid), re.M)
    return int(m.group(1)) if m else 0


def _cgroup_names(pid):
    try:
        text = (Path("/proc") / str(pid) / "cgroup").read_text()
    except OSError:
        return set()
    return set(re.findall(r"/cela/([^/\n]+)", text))


def is_ours(pid, sessions=None):
    sessions = own_session_ids() if sessions is None else sessions
    if _cgroup_names(pid) & sessions:
        return True
    seen = set()
    p = pid
    while p > 1 and p not in seen:
        if p in _owner_pids:
            return True
        seen.add(p)
        p = _ppid(p)
    return False


def all_sandbox_pids():
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        m = re.search(r"^Uid:\s+(\d+)\s+(\d+)", _status(d.name), re.M)
        if m and int(m.group(2)) >= UID_BASE:
            out.append(int(d.name))
    return out


def own_sandbox_pids():
    sessions = own_session_ids()
    return [p for p in all_sandbox_pids() if is_ours(p, sessions)]


def cela_cgroup_dirs(prefix):
    out = []
    for parent in list(CGROUP_ROOT.glob("*/cela")) + [CGROUP_ROOT / "cela"]:
        if parent.is_dir():
            out += [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    return out


def own_session_cgroups():
    sessions = own_session_ids()
    return [str(p) for p in cela_cgroup_dirs("s-") if p.name in sessions]


def cgroup_pids(path):
    try:
        return [int(x) for x in (Path(path) / "cgroup.procs").read_text().split()]
    except OSError:
        return []
