import os

import numpy as np
import pytest

os.environ.setdefault("PRIMC_CHECKS", "1")  # typecheck after every pass, always in tests


@pytest.fixture
def rng():
  return np.random.default_rng(0)
