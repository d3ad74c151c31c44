"""The integration tests' daemon harness (tests/integration/daemon_util.py), pointed at
the cela binary a benchmark measures, and the daemon configurations the benchmarks
share."""
import os
import sys

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration")


def integration_path():
    """Puts tests/integration (daemon_util, ownership) on sys.path."""
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)


def daemon_util(cela):
    """daemon_util, with every daemon it starts running `cela`."""
    os.environ["CELA_BIN"] = os.path.abspath(cela)
    integration_path()
    import conftest  # reads CELA_BIN
    conftest.CELA = os.environ["CELA_BIN"]
    import daemon_util as harness
    harness.CELA = os.environ["CELA_BIN"]
    return harness


def many_sessions_config(sessions, **extra):
    """A daemon meant to keep `sessions` idle sessions: admission grants far above what
    idle sessions use (docs/operations.md "Capacity"), a host and tenant session limit
    above the count, and no warm pool (every create is a cold one)."""
    limit = sessions + 16
    config = {"max_sessions": limit, "blocking_threads": 32, "pools": [],
              "admission": {"overcommit": {"memory": 1000, "pids": 1000, "files": 100000}},
              "tenant_quotas": {"max_sessions": limit, "max_memory_mb": 10 ** 9, "max_cpus": 4}}
    config.update(extra)
    return config
