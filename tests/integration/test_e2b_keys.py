"""Keys in E2B's form (docs/e2b.md "Control plane"): `cela key create --e2b` and
POST /v1/tenants/{t}/keys {"e2b": true} issue e2b_<hex> keys, which work as Bearer on
cela's API and as X-API-KEY, exactly as strictly as any other key."""
import os
import re
import subprocess

import pytest

from conftest import CELA
from daemon_util import Daemon

E2B_KEY = re.compile(r"^e2b_[0-9a-f]+$")


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(dev=False).start()
    yield d
    d.close()


def cli(daemon, *args, url=None, key=None):
    env = {k: v for k, v in os.environ.items() if k not in ("CELA_URL", "CELA_API_KEY")}
    cmd = [CELA, "key", "create", "--url", url or f"unix://{daemon.socket}", *args]
    if key:
        cmd += ["--api-key", key]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=env)


def tenant(daemon, name):
    status, t, _ = daemon.request("POST", "/v1/tenants", {"name": name})
    assert status == 201, t
    return t["id"]


def sessions_as(daemon, headers):
    status, body, _ = daemon.request("GET", "/v1/sessions", headers=headers, tcp=True)
    return status, body


def test_cli_issues_e2b_keys_that_work_as_bearer_and_x_api_key(daemon):
    p = cli(daemon, "--e2b")
    assert p.returncode == 0, p.stderr
    key = p.stdout.strip()
    assert E2B_KEY.match(key), key
    assert sessions_as(daemon, {"Authorization": f"Bearer {key}"})[0] == 200
    assert sessions_as(daemon, {"X-API-KEY": key})[0] == 200
    plain = cli(daemon).stdout.strip()
    assert plain.startswith("cela_") and not E2B_KEY.match(plain)
    assert sessions_as(daemon, {"X-API-KEY": plain})[0] == 200


def test_cli_tenant_by_name_admin_flag_and_json(daemon):
    tid = tenant(daemon, "keys-cli")
    import json
    p = cli(daemon, "--tenant", "keys-cli", "--admin", "--e2b", "--json")
    assert p.returncode == 0, p.stderr
    issued = json.loads(p.stdout)
    assert issued["tenant_id"] == tid and issued["admin"] is True and E2B_KEY.match(issued["key"])
    # The new admin key manages its own tenant and no other.
    status, t, _ = daemon.request("GET", f"/v1/tenants/{tid}", tcp=True, key=issued["key"])
    assert status == 200 and t["id"] == tid
    url = f"http://127.0.0.1:{daemon.port}"
    assert cli(daemon, "--e2b", url=url, key=issued["key"]).returncode == 0
    other = cli(daemon, "--tenant", "default", url=url, key=issued["key"])
    assert other.returncode == 1 and "no tenant default" in other.stderr
    missing = cli(daemon, "--tenant", "no-such-tenant")
    assert missing.returncode == 1 and "no tenant" in missing.stderr


def test_api_e2b_flag_and_strict_header_checks(daemon):
    status, tenants, _ = daemon.request("GET", "/v1/tenants")
    tid = next(t["id"] for t in tenants["tenants"] if t["name"] == "default")
    status, k, _ = daemon.request("POST", f"/v1/tenants/{tid}/keys", {"e2b": True})
    assert status == 201 and E2B_KEY.match(k["key"])
    status, err, _ = daemon.request("POST", f"/v1/tenants/{tid}/keys", {"e2b": "yes"})
    assert status == 400, err
    # A wrong key in either header is 401; a prefix or a padded variant is not the key.
    for headers in ({"X-API-KEY": "e2b_" + "0" * 64}, {"X-API-KEY": k["key"][:-1]}, {"X-API-KEY": k["key"] + "0"},
                    {"X-API-KEY": ""}, {"Authorization": "Bearer " + k["key"][:-2]}, {}):
        assert sessions_as(daemon, headers)[0] == 401, headers
    # E2B routes answer 401 in E2B's shape.
    status, body, _ = daemon.request("GET", "/v2/sandboxes", headers={"X-API-KEY": "e2b_00"}, tcp=True)
    assert status == 401 and body["code"] == 401 and isinstance(body["message"], str)
    status, body, _ = daemon.request("GET", "/v2/sandboxes", headers={"X-API-KEY": k["key"]}, tcp=True)
    assert status == 200 and body == []
