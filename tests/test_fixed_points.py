"""`primc.fixed_point` (autograd's `fixed_point`): the value is the iteration's, and its
derivatives of every order are the implicit function theorem's, in every path."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc.fixed_points import fixed_point


def _newton(a):
  return lambda x: 0.5 * (x + a / x)


def _descent(a):
  return lambda x: x - 0.05 * (x**2 - a)


def _distance(x, y):
  return pnp.max(pnp.abs(x - y))


def _sqrt(a, step=_newton, tol=1e-13):
  return fixed_point(step, a, 1.0 + 0.0 * a, _distance, tol)


def _iterated(step, a, x0, tol):
  """The oracle: the iteration in plain numpy, as autograd's loop runs it."""
  x, previous = step(a)(x0), x0
  while np.max(np.abs(x - previous)) > tol:
    x, previous = step(a)(x), x
  return x


def test_the_value_is_the_iterations():
  a = np.array([2.0, 3.0, 9.0])
  for step, tol in ((_newton, 1e-13), (_descent, 1e-4)):
    want = _iterated(step, a, np.full(3, 10.0), tol)
    got = fixed_point(step, a, np.full(3, 10.0), _distance, tol)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", ["plain", "jit"])
def test_derivatives_are_the_implicit_function_theorems(path):
  """d sqrt(a)/da = 1/(2 sqrt a), d2 = -a^(-3/2)/4, at the converged point (Newton's step:
  its derivative at the fixed point is zero, but not elsewhere: a derivative through
  the iterations would differ from these at a loose tolerance)."""
  wrap = primc.jit if path == "jit" else (lambda f: f)
  a = 2.0
  d1 = wrap(primc.grad(_sqrt))
  d2 = wrap(primc.grad(primc.grad(_sqrt)))
  np.testing.assert_allclose(d1(a), 0.5 / np.sqrt(a), rtol=1e-12)
  np.testing.assert_allclose(d2(a), -0.25 * a**-1.5, rtol=1e-10)
  a = np.array([2.0, 3.0, 5.0])
  np.testing.assert_allclose(wrap(primc.jacrev(_sqrt))(a), np.diag(0.5 / np.sqrt(a)), rtol=1e-12)


def test_a_slow_iteration_is_differentiated_at_its_point_not_through_its_steps():
  """Gradient descent on x^2 = a stops at tol 1e-4, ~1e-4 from sqrt(a): the implicit
  derivative there is dx/da = (df/da) / (1 - df/dx) = 0.05 / (0.1 x*), with the adjoint
  iterated to the same tolerance (so within ~1e-4 of it)."""
  a = 2.0
  x = _iterated(_descent, a, 10.0, 1e-4)
  got = primc.grad(lambda a: _sqrt(a, _descent, 1e-4))(a)
  np.testing.assert_allclose(got, 0.5 / x, rtol=1e-3)
  second = primc.grad(primc.grad(lambda a: _sqrt(a, _descent, 1e-4)))(a)
  np.testing.assert_allclose(second, -0.25 * a**-1.5, rtol=1e-2)


def test_vmap_of_the_gradient_and_the_start_has_no_gradient():
  a = np.array([2.0, 3.0, 5.0])
  np.testing.assert_allclose(primc.vmap(primc.grad(_sqrt))(a), 0.5 / np.sqrt(a), rtol=1e-12)
  start = primc.grad(lambda x0: fixed_point(_newton, 2.0, x0, _distance, 1e-13))(3.0)
  assert start == 0.0


def test_parameters_as_a_pytree_and_float32():
  """x* = cos(w x* + b): the derivatives with respect to (w, b) by the implicit function
  theorem (dx = -sin(u) (x dw + db) / (1 + w sin(u)), u = w x* + b), in float32 too."""
  step = lambda p: lambda x: pnp.cos(p[0] * x + p[1])
  for dtype, rtol, tol in ((np.float64, 1e-10, 1e-12), (np.float32, 1e-4, 1e-6)):
    w, b = np.asarray(0.5, dtype), np.asarray(0.3, dtype)
    x = fixed_point(step, (w, b), 0.0, _distance, tol)
    assert np.asarray(x).dtype == dtype
    s = np.sin(w * x + b)
    dw, db = primc.grad(lambda p: fixed_point(step, p, 0.0, _distance, tol))((w, b))
    np.testing.assert_allclose(dw, -s * x / (1 + w * s), rtol=rtol)
    np.testing.assert_allclose(db, -s / (1 + w * s), rtol=rtol)


def test_on_the_eager_tape():
  a = primc.to_tensor(np.array([2.0, 9.0]), stop_gradient=False)
  x = fixed_point(_newton, a, pnp.ones(2, "float64"), _distance, 1e-13)
  pnp.sum(x).backward()
  np.testing.assert_allclose(np.asarray(x.numpy()), np.sqrt([2.0, 9.0]), rtol=1e-14)
  np.testing.assert_allclose(np.asarray(a.grad.numpy()), 0.5 / np.sqrt([2.0, 9.0]), rtol=1e-12)
