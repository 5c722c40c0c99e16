"""Programs as people write them: sizes computed from shapes stay numbers, `full` takes a
traced value, vmap's axes are checked and may be pytrees, histogram edges have
derivatives, check_grads suits float32. Oracles: numpy, finite differences."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc.trace import Tracer

X = np.random.default_rng(0).standard_normal((2, 3, 4))


def _flatten_rows(x):
  n = pnp.prod(x.shape[1:])  # a number: shapes are static
  assert not isinstance(n, Tracer) and int(n) == 12
  return pnp.reshape(x, (x.shape[0], n))


@pytest.mark.parametrize("path", ["grad", "jit", "vmap", "plain"])
def test_sizes_from_shapes_are_numbers_in_every_path(path):
  f = lambda x: pnp.sum(pnp.tanh(_flatten_rows(x)) * 2.0)
  want_value = np.sum(np.tanh(X.reshape(2, 12)) * 2.0)
  if path == "grad":
    np.testing.assert_allclose(primc.grad(f)(X), 2 * (1 - np.tanh(X) ** 2), rtol=1e-12)
  elif path == "jit":
    np.testing.assert_allclose(primc.jit(f)(X), want_value, rtol=1e-12)
  elif path == "vmap":
    np.testing.assert_allclose(
      primc.vmap(f)(np.stack([X, -X])), [want_value, -want_value], rtol=1e-12
    )
  else:
    np.testing.assert_allclose(f(X), want_value, rtol=1e-12)


def test_full_of_a_traced_value():
  f = lambda v: pnp.sum(pnp.full((3, 2), v) * np.arange(6.0).reshape(3, 2))
  np.testing.assert_allclose(primc.grad(f)(2.0), 15.0)
  np.testing.assert_allclose(primc.jit(f)(2.0), 30.0)
  g = lambda v: pnp.full_like(np.zeros(3), v * 2)
  np.testing.assert_allclose(primc.jit(g)(1.5), [3.0, 3.0, 3.0])
  np.testing.assert_allclose(primc.jacfwd(g)(1.5), [2.0, 2.0, 2.0])


def test_vmap_out_axes_outside_the_output_are_errors():
  for out_axes, x in ((1, np.ones(5)), (5, np.ones((5, 2))), (-3, np.ones((5, 2)))):
    with pytest.raises(primc.PrimcError, match="out_axes"):
      primc.vmap(lambda x: x * 2, out_axes=out_axes)(x)
  got = primc.vmap(lambda x: x * 2, out_axes=-1)(np.ones((5, 2)))
  assert got.shape == (2, 5)


def test_vmap_axes_as_pytrees():
  d = {"a": np.arange(6.0).reshape(2, 3), "b": np.array([2.0, 3.0])}
  got = primc.vmap(lambda d: d["a"] * d["b"], in_axes=({"a": 1, "b": None},))(d)
  np.testing.assert_allclose(got, d["a"].T * d["b"])
  out = primc.vmap(lambda x: (x, {"s": x * 2}), out_axes=(0, {"s": 1}))(np.ones((4, 2)))
  assert out[0].shape == (4, 2) and out[1]["s"].shape == (2, 4)
  with pytest.raises(primc.PrimcError, match="does not match"):
    primc.vmap(lambda d: d["a"], in_axes=({"z": 0},))(d)


def test_histogram_edges_move_with_the_extremes():
  x = np.array([0.0, 1.0, 3.0])
  f = lambda x: pnp.sum(pnp.histogram(x, bins=2)[1])
  g = primc.grad(f)(x)
  eps = 1e-6
  fd = [
    (np.sum(np.histogram(x + eps * e, 2)[1]) - np.sum(np.histogram(x - eps * e, 2)[1])) / (2 * eps)
    for e in np.eye(3)
  ]
  np.testing.assert_allclose(g, fd, atol=1e-6)
  np.testing.assert_allclose(g, [1.5, 0.0, 1.5])


def test_check_grads_passes_correct_float32_functions_and_fails_wrong_ones():
  x = np.linspace(-1, 1, 4).astype(np.float32)
  primc.check_grads(lambda x: pnp.sum(pnp.sin(x) * x), (x,), order=2)

  @primc.custom_jvp
  def wrong(x):
    return pnp.sin(x)

  @wrong.defjvp
  def _(primals, tangents):
    return pnp.sin(primals[0]), tangents[0] * 2.0  # not cos

  with pytest.raises(AssertionError):
    primc.check_grads(lambda x: pnp.sum(wrong(x)), (x,), modes=("fwd",))
