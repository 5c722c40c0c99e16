"""In-place updates while tracing (`y[idx] = v`, `y += v`) are functionalized: random
update sequences give numpy's values under jit, kept transforms and vmap, and derivatives
agree with finite differences; views that numpy would write through are refused."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc.settings import config

INDICES = [0, -1, slice(1, 3), slice(None, None, 2), (np.array([0, 2]),),
           np.array([True, False, True, False, True]), Ellipsis]


def _apply(y, x, steps):
  """The update sequence on y (numpy array or traced), with values from x."""
  for kind, which, scale in steps:
    idx = INDICES[which]
    if kind == "set":
      y[idx] = x[which % 5] * scale
    elif kind == "set_scalar":
      y[idx] = scale
    elif kind == "iadd":
      y += x * scale
    elif kind == "imul":
      y *= scale
    else:
      y -= x[::-1] * scale
  return y


STEPS = st.lists(st.tuples(st.sampled_from(["set", "set_scalar", "iadd", "imul", "isub"]),
                           st.integers(0, len(INDICES) - 1),
                           st.floats(-2, 2, allow_nan=False, width=32)),
                 min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS)
def test_update_sequences_give_numpys_values_and_derivatives(steps):
  x = np.linspace(-1.0, 1.0, 5)

  def f(x):
    y = x * 1.0  # made in the function: its own to change
    z = y        # another name: sees every change, as in numpy
    _apply(y, x, steps)
    return z * z + x

  want = f(x.copy())  # numpy itself
  config.interpret = True  # the traced program, on the interpreter (compiled: below)
  try:
    np.testing.assert_allclose(primc.jit(f)(x), want, rtol=1e-12, atol=1e-12)
  finally:
    config.interpret = False
  np.testing.assert_allclose(primc.vmap(f)(np.stack([x, x])), np.stack([want, want]),
                             rtol=1e-12, atol=1e-12)
  loss = lambda x: pnp.sum(f(x) * np.arange(1.0, 6.0))
  g = primc.grad(loss)(x)
  eps = 1e-6
  fd = [(np.sum(f(x + eps * e) * np.arange(1.0, 6.0)) - np.sum(
      f(x - eps * e) * np.arange(1.0, 6.0))) / (2 * eps) for e in np.eye(5)]
  np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_an_update_sequence_compiled():
  x = np.linspace(-1.0, 1.0, 5)
  steps = [("set", 2, 1.5), ("iadd", 0, 0.5), ("set", 5, -1.0), ("imul", 1, 2.0)]

  def f(x):
    y = x * 1.0
    _apply(y, x, steps)
    return y

  np.testing.assert_allclose(primc.jit(f)(x), f(x.copy()), rtol=1e-12)


def test_views_numpy_would_write_through_are_refused():
  def into_view(x):
    y = pnp.zeros(4)
    v = y[1:3]
    v[0] = x
    return pnp.sum(y)

  def stale_view(x):
    y = pnp.zeros(4)
    v = y[1:3]
    y[1] = x
    return pnp.sum(v)

  for f in (into_view, stale_view):
    with pytest.raises(primc.PrimcError, match="view"):
      primc.grad(f)(2.0)
    with pytest.raises(primc.PrimcError, match="view"):
      primc.jit(f)(2.0)


def test_in_place_keeps_the_arrays_dtype_as_numpy_does():
  def f(x):
    y = pnp.zeros(3, dtype="float32")
    y += x  # float64 into float32: numpy casts (same kind)
    return y

  assert primc.jit(f)(np.ones(3)).dtype == np.float32

  def g(x):
    y = pnp.zeros(3, dtype="int32")
    y += x  # float into int: numpy refuses
    return y

  with pytest.raises(primc.PrimcError, match="same_kind"):
    primc.jit(g)(np.ones(3))
