"""numpy's other integer dtypes (int8, int16, uint8, uint16, uint32, uint64) as values in
every path: numpy's promotion (uint8 * float32 -> float32), wraparound and accumulation
dtypes, against numpy itself; derivatives in float arguments beside them."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

DTYPES = ["int8", "int16", "uint8", "uint16", "uint32", "uint64"]
OPS = {  # name: (primc's, numpy's) as functions of (a, b, w): a, b integers, w float32
  "add": lambda m: lambda a, b, w: m.add(a, b),
  "multiply": lambda m: lambda a, b, w: m.multiply(a, b),
  "subtract": lambda m: lambda a, b, w: m.subtract(a, b),
  "maximum": lambda m: lambda a, b, w: m.maximum(a, b),
  "times_float32": lambda m: lambda a, b, w: m.multiply(a, w),
  "sum": lambda m: lambda a, b, w: m.sum(a),
  "prod": lambda m: lambda a, b, w: m.prod(a[:3]),
  "cumsum": lambda m: lambda a, b, w: m.cumsum(a),
  "compare": lambda m: lambda a, b, w: m.less(a, b),
  "where": lambda m: lambda a, b, w: m.where(a > b, a, b),
  "reshape": lambda m: lambda a, b, w: m.reshape(a, (2, 3)),
  "index": lambda m: lambda a, b, w: a[::2],
  "astype_float": lambda m: lambda a, b, w: a.astype(np.float64) * 0.5,
}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(DTYPES), st.sampled_from(sorted(OPS)), st.integers(0, 2**31))
def test_integer_ops_match_numpy_plain_and_jitted(dtype, op, seed):
  info = np.iinfo(dtype)
  rng = np.random.default_rng(seed)
  a = rng.integers(info.min, info.max, 6, dtype=dtype, endpoint=True)
  b = rng.integers(info.min, info.max, 6, dtype=dtype, endpoint=True)
  w = rng.standard_normal(6).astype(np.float32)
  with np.errstate(all="ignore"):
    want = np.asarray(OPS[op](np)(a, b, w))
    for got in (OPS[op](pnp)(a, b, w), primc.jit(OPS[op](pnp))(a, b, w)):
      got = np.asarray(got)
      assert got.dtype == want.dtype, (got.dtype, want.dtype)
      np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_derivatives_beside_integer_data(dtype):
  """Image bytes and labels as data: the loss's gradient in the float weights, in every
  path (kept transform, jit, vmap); integer arguments have no derivative."""
  rng = np.random.default_rng(1)
  x = rng.integers(0, 100, (4, 3)).astype(dtype)
  w = rng.standard_normal(3)
  loss = lambda w, x: pnp.sum(pnp.tanh(x / 255.0 @ w) ** 2)
  t = np.tanh(x.astype(np.float64) / 255.0 @ w)
  want = (x.astype(np.float64) / 255.0).T @ (2 * t * (1 - t * t))
  np.testing.assert_allclose(primc.grad(loss)(w, x), want, rtol=1e-10)
  np.testing.assert_allclose(primc.jit(primc.grad(loss))(w, x), want, rtol=1e-10)
  per_row = primc.vmap(primc.grad(loss), in_axes=(None, 0))(w, x[:, None, :])
  np.testing.assert_allclose(per_row.sum(0), want, rtol=1e-10)
  with pytest.raises(TypeError, match="float"):
    primc.grad(loss, argnums=1)(w, x)
