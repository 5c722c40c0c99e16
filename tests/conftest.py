import os

import numpy as np
import pytest

os.environ.setdefault("PRIMC_CHECKS", "1")  # typecheck after every pass, always in tests
# A program compiles before its first call (every test runs native code, and counts
# compiles in its own process); the default policy, a first call on the interpreter while
# the kernels compile, is tested where it is asked for (tests/test_tiered.py).
os.environ.setdefault("PRIMC_TIERED", "0")
# A kernel the LLVM renderer fails on fails its test (users get numba's compile and a
# warning instead): set before primc is imported, so compile workers inherit it.
os.environ.setdefault("PRIMC_STRICT_KERNELS", "1")
# Kept transform programs are not stored across tests (tests count what is made, and one
# test's stored program would be another's, as the session shares the cache directory);
# tests/test_stored.py stores in a directory of each test's own.
os.environ.setdefault("PRIMC_STORE_TRANSFORMS", "0")
# Kept transform programs are not compiled once hot (`primc.kept._hot`): whether the calls
# of a test have paid for a compile depends on the machine's speed, and native math is an
# ulp from numpy's, so a test comparing calls bit for bit would pass or fail by the load.
# The tests of hot compiles ask for them (`hot_compiles`).
os.environ.setdefault("PRIMC_COMPILE_HOT", "0")
from primc.settings import config  # noqa: E402  (primc's plugin imported it already: pytest

config.tiered = {"1": True, "0": False}.get(os.environ["PRIMC_TIERED"])  # loads it first)
config.store_transforms = os.environ["PRIMC_STORE_TRANSFORMS"] != "0"
config.compile_hot_transforms = os.environ["PRIMC_COMPILE_HOT"] != "0"
# One cache directory for the whole session, so tests share compiled kernels: primc's
# pytest plugin, with --primc-cache-dir=temp (pyproject.toml's addopts).


@pytest.fixture
def hot_compiles(monkeypatch):
  """Kept programs compiled once hot, as by default outside the suite."""
  monkeypatch.setattr(config, "compile_hot_transforms", True)


@pytest.fixture
def rng():
  return np.random.default_rng(0)
