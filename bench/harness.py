"""The integration tests' daemon harness (tests/integration/daemon_util.py), pointed at
the cela binary a benchmark measures."""
import os
import sys

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration")


def daemon_util(cela):
    """daemon_util, with every daemon it starts running `cela`."""
    os.environ["CELA_BIN"] = os.path.abspath(cela)
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    import conftest  # reads CELA_BIN
    conftest.CELA = os.environ["CELA_BIN"]
    import daemon_util as harness
    harness.CELA = os.environ["CELA_BIN"]
    return harness
