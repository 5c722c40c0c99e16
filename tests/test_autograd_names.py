"""autograd's names for the transforms (primc.jacobian, elementwise_grad, make_vjp, ...),
against formulas written with numpy and against primc's own transforms, eager and under
jit."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp

R = np.random.default_rng(4)
X = R.standard_normal(5)
V = R.standard_normal(5)
W = R.standard_normal((3, 5))


def f(x):
  return pnp.sum(pnp.tanh(x) ** 2 * x)


def vector_f(x):  # R^5 -> R^3
  return pnp.tanh(pnp.matmul(W, x))


def _df(x):  # d/dx sum(tanh(x)^2 x)
  t = np.tanh(x)
  return 2 * t * (1 - t * t) * x + t * t


def _jacobian(x):
  t = np.tanh(W @ x)
  return (1 - t * t)[:, None] * W


def _hessian(x):
  eps = 1e-6
  return np.stack([(_df(x + eps * e) - _df(x - eps * e)) / (2 * eps) for e in np.eye(5)], 1)


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_names(compiled):
  wrap = primc.jit if compiled else (lambda g: g)
  np.testing.assert_allclose(wrap(primc.jacobian(vector_f))(X), _jacobian(X), rtol=1e-10)
  np.testing.assert_allclose(
    wrap(primc.elementwise_grad(pnp.tanh))(X), 1 - np.tanh(X) ** 2, rtol=1e-12
  )
  np.testing.assert_allclose(wrap(primc.deriv(vector_f))(X), _jacobian(X).sum(0), rtol=1e-10)
  g, aux = wrap(primc.grad_and_aux(lambda x: (f(x), x * 2)))(X)
  np.testing.assert_allclose(g, _df(X), rtol=1e-10)
  np.testing.assert_allclose(aux, 2 * X)
  u = R.standard_normal(3)
  np.testing.assert_allclose(
    wrap(primc.tensor_jacobian_product(vector_f))(X, u), u @ _jacobian(X), rtol=1e-10
  )
  np.testing.assert_allclose(
    wrap(primc.vector_jacobian_product(vector_f))(X, u), u @ _jacobian(X), rtol=1e-10
  )
  np.testing.assert_allclose(
    wrap(primc.hessian_tensor_product(f))(X, V), _hessian(X) @ V, rtol=1e-6, atol=1e-8
  )
  np.testing.assert_allclose(
    wrap(primc.hessian_vector_product(f))(X, V), _hessian(X) @ V, rtol=1e-6, atol=1e-8
  )
  np.testing.assert_allclose(wrap(primc.grad(primc.checkpoint(f)))(X), _df(X), rtol=1e-10)


def test_make_functions_return_autograd_pairs():
  pullback, value = primc.make_vjp(vector_f)(X)
  np.testing.assert_allclose(value, np.tanh(W @ X))
  u = R.standard_normal(3)
  np.testing.assert_allclose(pullback(u), u @ _jacobian(X), rtol=1e-10)
  value, tangent = primc.make_jvp(vector_f)(X)(V)
  np.testing.assert_allclose(tangent, _jacobian(X) @ V, rtol=1e-10)
  hvp_fn, value = primc.make_hvp(f)(X)
  np.testing.assert_allclose(value, np.sum(np.tanh(X) ** 2 * X))
  np.testing.assert_allclose(hvp_fn(V), _hessian(X) @ V, rtol=1e-6, atol=1e-8)
  # Gauss-Newton of 1/2 |f(x)|^2: J^T J v
  np.testing.assert_allclose(
    primc.make_ggnvp(vector_f)(X)(V), _jacobian(X).T @ (_jacobian(X) @ V), rtol=1e-10
  )


def test_argnum_selects_the_argument():
  h = lambda a, b: pnp.sum(a * pnp.sin(b))
  a, b = R.standard_normal(4), R.standard_normal(4)
  np.testing.assert_allclose(primc.elementwise_grad(h, 1)(a, b), a * np.cos(b), rtol=1e-12)
  np.testing.assert_allclose(primc.make_vjp(h, 1)(a, b)[0](1.0), a * np.cos(b), rtol=1e-12)
  np.testing.assert_allclose(
    primc.hessian_tensor_product(h, 1)(a, b, V[:4]), -a * np.sin(b) * V[:4], rtol=1e-10
  )


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_spellings_of_numpy_extras(compiled):
  """`grad(f, argnum=1)`, `make_diagonal` (autograd's inverse of `diagonal`), `np.fft`'s
  real shifts (against numpy's) and `np.__version__`; the derivatives of the shifts are
  the shifts back, of make_diagonal the diagonal."""
  wrap = primc.jit if compiled else (lambda f: f)
  f = lambda x, y: pnp.sum(pnp.sin(x) * y)
  np.testing.assert_allclose(wrap(primc.grad(f, argnum=1))(X, V), np.sin(X))
  np.testing.assert_allclose(wrap(primc.value_and_grad(f, argnum=1))(X, V)[1], np.sin(X))
  D = R.standard_normal((2, 4))
  made = wrap(lambda d: pnp.make_diagonal(d, axis1=-1, axis2=-2))(D)
  assert made.shape == (2, 4, 4)
  np.testing.assert_array_equal(np.diagonal(made, axis1=-1, axis2=-2), D)
  np.testing.assert_array_equal(made - np.eye(4) * made, 0)
  ct = R.standard_normal((2, 4, 4))
  np.testing.assert_allclose(
    wrap(lambda d: primc.vjp(lambda e: pnp.make_diagonal(e), d)[1](ct)[0])(D),
    np.diagonal(ct, axis1=-1, axis2=-2),
  )
  A = R.standard_normal((5, 6))
  for axes in (None, 0, (1,), (0, 1)):
    np.testing.assert_array_equal(
      wrap(lambda a: pnp.fft.fftshift(a, axes))(A), np.fft.fftshift(A, axes)
    )
    np.testing.assert_array_equal(
      wrap(lambda a: pnp.fft.ifftshift(a, axes))(A), np.fft.ifftshift(A, axes)
    )
    back = wrap(lambda a: primc.vjp(lambda b: pnp.fft.fftshift(b, axes), a)[1](A)[0])(A)
    np.testing.assert_array_equal(back, np.fft.ifftshift(A, axes))
  assert pnp.__version__ == np.__version__
  with pytest.raises(primc.numpy.NotSupportedError, match="complex"):
    pnp.fft.rfft(A)
