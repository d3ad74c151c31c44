"""Nothing of the host is visible or runnable from inside, and init survives OOM and a
full disk (docs/security.md; issue 7). Each test attacks from inside a
sandbox; those marked with the runner run with `cela run` and again in a daemon
session (conftest.runner)."""
import pytest

from daemon_util import Daemon


# ---- the dev-only `host` template ---------------------------------------------------

def create(daemon, template="host", **kw):
    return daemon.request("POST", "/v1/sessions", {"template": template, "limits": {"memory_mb": 128}}, **kw)


def assert_refused(answer):
    status, err, _ = answer
    assert status == 403, (status, err)
    assert err["error"]["code"] == "forbidden" and "dev" in err["error"]["message"], err


def test_without_dev_mode_no_session_gets_the_host_template():
    d = Daemon({"max_sessions": 5}, dev=False).start()
    try:
        assert_refused(create(d))  # not even local root
        assert_refused(create(d, tcp=True, key=d.key))
        assert d.request("GET", "/v1/sessions")[1]["sessions"] == []
    finally:
        d.close()


@pytest.mark.parametrize("how", ["flag", "config"])
def test_in_dev_mode_only_local_root_gets_the_host_template(how):
    d = (Daemon({"max_sessions": 5}) if how == "flag" else Daemon({"max_sessions": 5, "dev_mode": True}, dev=False))
    d.start()
    try:
        status, s, _ = create(d)
        assert status == 201, s
        d.delete(s["id"])
        # The operator's own key over TCP is not local root.
        assert_refused(create(d, tcp=True, key=d.key))
    finally:
        d.close()
