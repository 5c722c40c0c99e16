import os

import numpy as np
import pytest

os.environ.setdefault("PRIMC_CHECKS", "1")  # typecheck after every pass, always in tests
# One cache directory for the whole session, so tests share compiled kernels: primc's
# pytest plugin, with --primc-cache-dir=temp (pyproject.toml's addopts).


@pytest.fixture
def rng():
  return np.random.default_rng(0)
