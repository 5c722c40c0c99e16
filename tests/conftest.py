import os
import tempfile

import numpy as np
import pytest

os.environ.setdefault("PRIMC_CHECKS", "1")  # typecheck after every pass, always in tests
# One cache directory for the whole session, so tests share compiled kernels.
_CACHE = tempfile.mkdtemp(prefix="primc-test-cache-")
os.chmod(_CACHE, 0o700)
os.environ["PRIMC_CACHE_DIR"] = _CACHE


@pytest.fixture
def rng():
  return np.random.default_rng(0)
