"""Python control flow on traced values (`if`, `while`, indexing a numpy array with a
traced index) inside functions given to the transforms outside `jit`: traced again with
the call's values, the path taken is differentiated as one program (as autograd's tape
records it). Random branching programs against numpy and finite differences."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

OPS = [lambda y: y * y, lambda y: pnp.sin(y), lambda y: y * 3.0 - 1.0,
       lambda y: pnp.tanh(y) + y, lambda y: pnp.exp(-y * y)]
NP_OPS = [lambda y: y * y, np.sin, lambda y: y * 3.0 - 1.0, lambda y: np.tanh(y) + y,
          lambda y: np.exp(-y * y)]


def _program(steps, ops, record=None):
  """y through `steps` (threshold, op if above, op if not), branching on sum(y)."""
  def f(x):
    y = x
    for threshold, above, below in steps:
      taken = (y * 1.0).sum() > threshold
      if record is not None:
        record.append(bool(taken))
      y = ops[above](y) if taken else ops[below](y)
    return (y * y).sum()
  return f


STEPS = st.lists(st.tuples(st.floats(-2, 2, allow_nan=False), st.integers(0, len(OPS) - 1),
                           st.integers(0, len(OPS) - 1)), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS, st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3))
def test_branching_programs_match_numpy_and_finite_differences(steps, x):
  x = np.array(x)
  eps = 1e-6
  paths = []
  for point in [x] + [x + s * eps * e for e in np.eye(3) for s in (1, -1)]:
    record = []
    _program(steps, NP_OPS, record)(point)
    paths.append(record)
  assume(all(p == paths[0] for p in paths))  # no branch flips within the step
  value = _program(steps, NP_OPS)(x)
  got_value, got_grad = primc.value_and_grad(_program(steps, OPS))(x)
  np.testing.assert_allclose(got_value, value, rtol=1e-10, atol=1e-12)
  f = _program(steps, NP_OPS)
  fd = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)]
  np.testing.assert_allclose(got_grad, fd, rtol=1e-5, atol=1e-5)
  # second order through the same path: the Hessian against differences of gradients
  h = primc.hessian(_program(steps, OPS))(x)
  g = lambda p: primc.grad(_program(steps, OPS))(p)
  fd2 = np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(3)])
  np.testing.assert_allclose(h, fd2, rtol=1e-4, atol=1e-4)


def test_a_while_loop_on_values_differentiates_its_iterations():
  def newton_sqrt(x):
    y = x
    while pnp.abs(y * y - x).max() > 1e-12:
      y = 0.5 * (y + x / y)
    return pnp.sum(y)
  x = np.array([4.0, 9.0, 2.0])
  np.testing.assert_allclose(primc.grad(newton_sqrt)(x), 0.5 / np.sqrt(x), rtol=1e-9)


def test_a_traced_index_into_a_numpy_array():
  table = np.arange(10.0) ** 2
  f = lambda x: pnp.sum(x * table[pnp.argmax(x)])  # the value at the largest's position
  x = np.array([1.0, 5.0, 2.0])
  np.testing.assert_allclose(primc.grad(f)(x), np.full(3, table[1]))
  idx = lambda x: pnp.sum(table[pnp.argsort(x)] * x)
  np.testing.assert_allclose(primc.grad(idx)(x), table[np.argsort(x)])


def test_under_jit_a_branch_on_a_value_is_a_clear_error():
  def f(x):
    return x * 2.0 if pnp.sum(x) > 0 else x
  with pytest.raises(primc.PrimcError, match="if"):
    primc.jit(f)(np.ones(2))
