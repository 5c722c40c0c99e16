"""The vectorizable math library: max ulp error against numpy (float64/longdouble
references) on dense samples, and exact IEEE edge cases."""

import numpy as np
import pytest
from numba import njit

from primc.codegen import mathlib

# documented in docs/guide/compiling.md: max ulp error over the samples below
BOUNDS = {"exp": 1.5, "log": 1.5, "tanh": 3.0, "sin": 2.5, "cos": 2.5}
REFERENCE = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sin": np.sin, "cos": np.cos}
_kernels = {}


def run(name, x):
  fn = getattr(mathlib, mathlib.FUNCTIONS[(name, x.dtype.name)])
  if fn not in _kernels:

    @njit(error_model="numpy")
    def kernel(x, out):
      for i in range(x.size):
        out[i] = fn(x[i])

    _kernels[fn] = kernel
  out = np.empty_like(x)
  _kernels[fn](x, out)
  return out


def samples(name, dtype):
  rng = np.random.default_rng(1)
  if name == "exp":
    lo, hi = (-103, 88.7) if dtype == "float32" else (-745, 709.7)
    parts = [rng.uniform(lo, hi, 200_000), rng.uniform(-1, 1, 50_000)]
  elif name == "log":
    top = 38 if dtype == "float32" else 300
    parts = [
      10.0 ** rng.uniform(-top, top, 200_000),
      rng.uniform(0.5, 2, 50_000),
      rng.uniform(0, 1e-38 if dtype == "float32" else 1e-307, 10_000),
    ]  # denormals
  elif name == "tanh":
    parts = [
      rng.uniform(-20, 20, 200_000),
      rng.uniform(-1, 1, 50_000),
      10.0 ** rng.uniform(-30, 0, 10_000),
    ]
  else:
    limit = mathlib.SINCOS_LIMIT[dtype]
    parts = [rng.uniform(-10, 10, 200_000), rng.uniform(-limit, limit, 100_000)]
  return np.concatenate(parts).astype(dtype)


def ulps(got, x, name, dtype):
  want = REFERENCE[name](x.astype(np.longdouble))
  want_t = want.astype(dtype)
  err = np.abs(got.astype(np.longdouble) - want) / np.spacing(np.abs(want_t)).astype(np.longdouble)
  return np.where(got == want_t, 0, err).astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(BOUNDS))
def test_max_ulp_error(name, dtype):
  x = samples(name, dtype)
  with np.errstate(all="ignore"):
    err = ulps(run(name, x), x, name, dtype)
  finite = np.isfinite(err)
  assert finite.all(), x[~finite][:5]
  worst = err.max()
  assert worst <= BOUNDS[name], f"{name} {dtype}: {worst:.2f} ulp at x={x[err.argmax()]!r}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(BOUNDS))
def test_edge_cases_match_numpy_exactly(name, dtype):
  tiny = np.finfo(dtype).tiny
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, tiny / 8, 1.0, -1.0], dtype)
  if name in ("sin", "cos"):
    x = x[np.isnan(x) | (np.abs(x) <= mathlib.SINCOS_LIMIT[dtype])]  # larger: kernels use libm
  with np.errstate(all="ignore"):
    got, want = run(name, x), REFERENCE[name](x)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  close = (
    np.isclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=0)
    | (got == want)
    | (np.isnan(got) & np.isnan(want))
  )
  assert close.all(), (x[~close], got[~close], want[~close])
  zeros = (want == 0) & ~np.isnan(want)
  np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))  # ±0 kept


def test_overflow_and_underflow_boundaries():
  x = np.array([88.72, 88.73, 89.0, -87.0, -100.0, -104.0, -110.0], np.float32)
  with np.errstate(all="ignore"):
    np.testing.assert_allclose(run("exp", x), np.exp(x), rtol=2e-7, atol=1e-44)
  x = np.array([709.7, 709.8, -740.0, -745.1, -746.0], np.float64)
  with np.errstate(all="ignore"):
    np.testing.assert_allclose(run("exp", x), np.exp(x), rtol=4e-16, atol=1e-323)
