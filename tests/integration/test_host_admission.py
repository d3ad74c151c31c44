"""Host-wide admission (docs/operations.md "Capacity"): cela processes sharing a ledger
directory (admission.ledger_dir, `cela run --ledger-dir`) count each other's grants of
memory, pids and open files, so two daemons, a one-shot run and a template build
together stay within the host's capacity. Every ledger here is the test's own."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import CELA, run_owned
from daemon_util import Daemon

BASE = Path("/var/lib/cela/templates/base")
pytestmark = pytest.mark.skipif(not (BASE / "current").exists(), reason="the base template is not built")

# 1024 MiB of session memory on this host, no overcommit: two sessions of 512 fill it.
ADMISSION = {"host": {"memory_mb": 1024}, "overcommit": {"memory": 1.0}}
SESSION = {"template": "base", "limits": {"memory_mb": 512}}


@pytest.fixture
def ledger():
    d = tempfile.mkdtemp(prefix="cela-test-ledger-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store():
    """A template store of the test's own (base linked in): a build refused or not
    writes nothing into the shared one."""
    root = Path(tempfile.mkdtemp(prefix="cela-test-templates-"))
    store = root / "store"
    store.mkdir(mode=0o700)
    (store / "base").symlink_to(BASE)
    yield store
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def daemons(ledger, store):
    """Daemons A and B, each with its own state dir, sharing `ledger`."""
    started = []
    try:
        for _ in range(2):
            d = Daemon({"admission": dict(ADMISSION, ledger_dir=ledger), "templates_dir": str(store)})
            started.append(d)
            d.start()
        yield started
    finally:
        for d in started:
            d.close()


def create(d):
    return d.request("POST", "/v1/sessions", SESSION)


def cela_run(ledger, memory="256m"):
    return run_owned([CELA, "run", "--template", "host", "--ledger-dir", ledger, "--memory", memory,
                      "--", "true"], timeout=120)


def test_two_daemons_one_ledger_run_and_build(daemons, ledger):
    a, b = daemons
    ids_a, ids_b = [], []
    try:
        for _ in range(2):
            st, s, _ = create(a)
            assert st == 201, s
            ids_a.append(s["id"])
        # A fills the host: B, with nothing of its own, is refused and says why.
        st, err, _ = create(b)
        assert st == 503, err
        assert err["error"]["code"] == "capacity_exceeded", err
        msg = err["error"]["message"]
        assert "MiB of session memory" in msg and "other cela processes" in msg and ledger in msg, msg
        # `cela run` (which measured the whole host) keeps within the daemons' 1024 MiB.
        r = cela_run(ledger)
        assert r.returncode == 75, (r.returncode, r.stdout, r.stderr)
        assert "MiB of session memory" in r.stderr and "try again later" in r.stderr, r.stderr
        # A template build's step jails (1024 MiB) do not fit either: 503 at once.
        st, err, _ = b.request("POST", "/v1/templates", {"name": "ledger-full", "from": "base",
                                                         "steps": [{"run": "true"}]})
        assert st == 503, err
        assert err["error"]["code"] == "capacity_exceeded" and "MiB of session memory" in err["error"]["message"], err

        # A session of A ends: its grant leaves the ledger, and B gets the room.
        a.delete(ids_a.pop())
        st, s, _ = create(b)
        assert st == 201, s
        ids_b.append(s["id"])
        st, err, _ = create(a)
        assert st == 503 and "other cela processes" in err["error"]["message"], err
    finally:
        for sid in ids_a:
            a.delete(sid)
        for sid in ids_b:
            b.delete(sid)
    # Nothing held any more: a run fits, and its grant is gone once it ended.
    r = cela_run(ledger)
    assert r.returncode == 0, (r.returncode, r.stderr)
    st, s, _ = create(b)
    assert st == 201, s
    st2, s2, _ = create(a)
    assert st2 == 201, s2
    b.delete(s["id"])
    a.delete(s2["id"])


def test_a_daemon_that_died_leaves_nothing_held(ledger, store):
    a = Daemon({"admission": dict(ADMISSION, ledger_dir=ledger), "templates_dir": str(store)})
    b = Daemon({"admission": dict(ADMISSION, ledger_dir=ledger), "templates_dir": str(store)})
    try:
        a.start()
        b.start()
        for _ in range(2):
            st, s, _ = create(a)
            assert st == 201, s
        st, err, _ = create(b)
        assert st == 503, err
        a.stop(sig=9)  # no clean exit: its ledger file stays until someone sees it is dead
        st, s, _ = create(b)
        assert st == 201, s
        assert not any(n.startswith(f"{a.proc.pid}-") for n in os.listdir(ledger)), os.listdir(ledger)
        b.delete(s["id"])
        a.start()  # on its state dir again: recovery ends what the killed daemon left
    finally:
        a.close()
        b.close()
