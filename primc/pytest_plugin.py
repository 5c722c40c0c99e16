"""primc's pytest plugin (registered under the `pytest11` entry point, so pytest loads it
wherever primc is installed).

- `--primc-cache-dir=PATH` gives the session one compiled-kernel cache (PRIMC_CACHE_DIR for
  the tests and the processes they start); `--primc-cache-dir=temp` makes a private one for
  the session, removed at its end (pytest-xdist's workers share it). Without the option
  nothing changes.
- the `check_grads` fixture: `primc.check_grads` (finite differences in float64, forward
  and reverse, any order), whose failures show the first mismatching entries.
- `@pytest.mark.primc_both` runs a test twice: compiled, and interpreted (every
  `primc.jit` in it runs its programs on the reference interpreter), as `[compiled]` and
  `[interpreted]`.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

import primc  # (the IR and errors only: the library loads at a fixture's first use)


def pytest_addoption(parser):
  group = parser.getgroup("primc")
  group.addoption(
    "--primc-cache-dir",
    default=None,
    metavar="PATH",
    help="one compiled-kernel cache for the session ('temp': a private one, removed at the end)",
  )


def pytest_configure(config):
  config.addinivalue_line("markers", "primc_both: run the test compiled and interpreted")
  path = config.getoption("--primc-cache-dir")
  if path is None:
    return
  if path == "temp":  # one for the session: pytest-xdist's workers share their parent's
    path = os.environ.get("PRIMC_TEST_SESSION_CACHE")
    if path is None:
      path = tempfile.mkdtemp(prefix="primc-test-cache-")
      os.environ["PRIMC_TEST_SESSION_CACHE"] = path
      config._primc_temp_cache = path
  elif os.path.lexists(path) and not os.path.isdir(path):
    raise pytest.UsageError(f"--primc-cache-dir={path}: not a directory")
  elif not os.path.isdir(path):  # made here, private; an existing one keeps its mode
    os.makedirs(path, mode=stat.S_IRWXU)
  os.environ["PRIMC_CACHE_DIR"] = os.path.abspath(path)


def pytest_unconfigure(config):
  path = getattr(config, "_primc_temp_cache", None)
  if path:
    shutil.rmtree(path, ignore_errors=True)


def pytest_generate_tests(metafunc):
  if metafunc.definition.get_closest_marker("primc_both"):
    if "primc_mode" not in metafunc.fixturenames:
      metafunc.fixturenames.append("primc_mode")
    metafunc.parametrize("primc_mode", ["compiled", "interpreted"], indirect=True)


@pytest.fixture
def primc_mode(request, monkeypatch):
  """The mode a `primc_both` test runs in (its `jit`s interpret in "interpreted")."""
  mode = request.param
  monkeypatch.setattr(primc.config, "interpret", mode == "interpreted")
  return mode


@pytest.fixture
def check_grads():
  """`primc.check_grads(f, args, order=1, modes=("fwd", "rev"), ...)`."""
  return primc.check_grads
