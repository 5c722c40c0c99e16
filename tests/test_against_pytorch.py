"""primc.nn.functional and the seed's vgg11 against PyTorch: values and gradients of
convolutions (1-3 spatial dims, strides, paddings, dilations, groups), max, average and
adaptive pooling, batch and layer norm and cross entropy, in float32 and float64, on
shapes hypothesis draws; and the dynamic-graph seed's program (vgg11, a 224x224 image,
`loss.backward()`) against the same network in PyTorch with the same weights.

The checks are `benchmarks/check_torch.py`'s (one implementation; `make bench-peers` runs
it too). PyTorch is not a dependency of primc, so these tests run where it is installed:
`.ci/run` installs its CPU build and sets PRIMC_REQUIRE_TORCH=1, under which its absence
fails them instead of skipping them.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if os.environ.get("PRIMC_REQUIRE_TORCH", "") not in ("", "0"):
  import torch  # noqa: F401  (required: its absence is an error)
else:
  pytest.importorskip("torch", reason="PyTorch is not installed (see the module docstring)")

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import primc  # noqa: E402
import primc.numpy as pnp  # noqa: E402
from benchmarks import check_torch  # noqa: E402
from primc.nn import functional as F  # noqa: E402


@pytest.mark.parametrize("kind", sorted(check_torch.CHECKS))
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(["float32", "float64"]))
def test_layers_match_pytorch(kind, seed, dtype):
  """One drawn case of the kind (its shapes, strides, paddings, ... from `seed`): primc's
  values and gradients within the dtype's tolerance of PyTorch's."""
  rng = np.random.default_rng(seed)
  worst = check_torch.CHECKS[kind](rng, dtype, torch, tF, F, primc, pnp)
  assert worst <= check_torch.TOL[dtype], (kind, dtype, seed, worst)


def test_seed_vgg11_loss_and_gradients_match_pytorch():
  """The seed's vgg11 step in float64: the loss and all 22 parameters' gradients."""
  worst, n = check_torch.check_seed_vgg11(torch, tF, primc)
  assert n == 22
  assert worst <= check_torch.TOL["float64"], worst
