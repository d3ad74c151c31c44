"""The Python SDK installs the two ways sdk/python/README.md shows, on Debian 12 with no
package index: `pip install --no-build-isolation sdk/python` and the wheel `make sdk`
builds (the build directory's `sdk` target). Both land a typed package (PEP 561
py.typed) with its licence, usable from outside the source tree. CELA_BUILD_DIR is the
build directory (ctest sets it)."""
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("CELA_BUILD_DIR", ROOT / "build"))
# No index at all: an install that needs one fails here, as it would on a box without PyPI.
OFFLINE = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
OFFLINE.pop("PYTHONPATH", None)


def run(*args, **kw):
    kw.setdefault("env", OFFLINE)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture
def tmp():
    d = Path(tempfile.mkdtemp(prefix="cela-sdk-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def venv(where):
    # --system-site-packages: Debian's python3-wheel, which setuptools needs to build one.
    r = run("/usr/bin/python3", "-m", "venv", "--system-site-packages", where)
    assert r.returncode == 0, r.stderr
    return where / "bin/python"


def installed_package(python, cwd):
    """Where the venv imports cela from, and the files of that package."""
    r = run(python, "-c", "import cela, os; print(os.path.dirname(cela.__file__)); "
                          "print(cela.Sandbox.__name__)", cwd=cwd)
    assert r.returncode == 0, r.stderr
    where, name = r.stdout.split()
    assert name == "Sandbox"
    return Path(where)


def assert_typed_and_licensed(python, venv_dir, cwd):
    package = installed_package(python, cwd)
    assert venv_dir in package.parents, f"imported from {package}, not the venv"
    assert (package / "py.typed").is_file()
    r = run(python, "-m", "pip", "show", "cela")
    assert r.returncode == 0 and "License: Apache-2.0" in r.stdout, r.stdout + r.stderr


def test_make_sdk_builds_a_typed_wheel_offline():
    leftovers = [ROOT / "sdk/python/build", ROOT / "sdk/python/cela.egg-info"]
    before = [p.exists() for p in leftovers]
    r = run("cmake", "--build", BUILD, "--target", "sdk")
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list((BUILD / "sdk/dist").glob("cela-*-py3-none-any.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "cela/py.typed" in names and "cela/sandbox.py" in names
    assert any(n.endswith(".dist-info/LICENSE") for n in names), names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheels[0]).read(metadata).decode()
    # Standard library only: nothing to fetch on install (websockets is the `ws` extra).
    assert not [line for line in text.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line], text
    # Built from a copy: the source tree gets no build/ or egg-info.
    assert [p.exists() for p in leftovers] == before


def test_wheel_installs_into_a_venv(tmp):
    r = run("cmake", "--build", BUILD, "--target", "sdk")
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next((BUILD / "sdk/dist").glob("cela-*.whl"))
    python = venv(tmp / "venv")
    r = run(python, "-m", "pip", "install", "-q", wheel)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_typed_and_licensed(python, tmp / "venv", cwd=tmp)


def test_source_directory_installs_without_build_isolation(tmp):
    # A copy (links followed, as a checkout has them) keeps this tree free of build/.
    source = tmp / "python"
    shutil.copytree(ROOT / "sdk/python", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    python = venv(tmp / "venv")
    r = run(python, "-m", "pip", "install", "-q", "--no-build-isolation", source)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_typed_and_licensed(python, tmp / "venv", cwd=tmp)
    # With build isolation pip would fetch setuptools from an index: that is why the
    # README says --no-build-isolation.
    r = run(python, "-m", "pip", "install", "-q", "--force-reinstall", source)
    assert r.returncode != 0
