"""primc.scipy and primc.lax take the front ends' values as primc.numpy does: eager tensors
(control flow runs as Python's, each op on the tape, closed-over tensors differentiated
too) and static program variables (the op recorded whole). Oracle: the same function on
plain arrays through `primc.jacfwd` (while_loop has no reverse mode), itself checked
against finite differences."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp
import primc.scipy.special as sps
import primc.scipy.stats as sst
from primc import autograd, eager, lax, static

X = np.array([0.3, -0.7, 1.1])
W = np.array([0.9, 1.2, -0.4])

CASES = {
  "logsumexp": lambda x, w: sps.logsumexp(x * w),
  "gammaln": lambda x, w: pnp.sum(sps.gammaln(x * x + w * w + 0.5)),
  "norm.logpdf": lambda x, w: pnp.sum(sst.norm.logpdf(x, w, 2.0)),
  "scan": lambda x, w: lax.scan(lambda c, xi: (c * pnp.cos(xi) + xi * w[0], c), x[0], x)[0],
  "scan_ys": lambda x, w: pnp.sum(
    lax.scan(lambda c, xi: (c + xi, pnp.sin(c) * w), x[1], x, reverse=True)[1]
  ),
  "fori_loop": lambda x, w: pnp.sum(lax.fori_loop(0, 3, lambda i, v: pnp.tanh(v * w) + x, x)),
  "while_loop": lambda x, w: pnp.sum(
    lax.while_loop(lambda v: pnp.sum(v * v) < 50.0, lambda v: v * 1.7 + w, x)
  ),
  "cond": lambda x, w: pnp.sum(lax.cond(pnp.sum(x) > 0, lambda a: a * w, pnp.sin, x)),
  "switch": lambda x, w: pnp.sum(lax.switch(pnp.argmax(x), [pnp.sin, pnp.cos, lambda a: a * w], x)),
}


def _finite_differences(f, x, eps=1e-6):
  return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


@pytest.mark.parametrize("name", sorted(CASES))
def test_on_plain_arrays_against_finite_differences(name):
  f = CASES[name]
  want = _finite_differences(lambda x: float(f(x, W)), X)
  np.testing.assert_allclose(primc.jacfwd(f)(X, W), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(CASES))
def test_on_eager_tensors_with_their_gradients(name):
  f = CASES[name]
  x = eager.to_tensor(X, stop_gradient=False)
  w = eager.to_tensor(W, stop_gradient=False)  # closed over by the bodies: differentiated
  y = f(x, w)
  assert isinstance(y, eager.Tensor)
  np.testing.assert_allclose(y.value, f(X, W), rtol=1e-12)
  gx, gw = eager.grad(y, [x, w])
  np.testing.assert_allclose(gx.value, primc.jacfwd(f, 0)(X, W), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(gw.value, primc.jacfwd(f, 1)(X, W), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["logsumexp", "norm.logpdf", "scan", "fori_loop", "cond"])
def test_on_static_program_variables(name):
  f = CASES[name]
  static.enable_static()
  try:
    static.reset()
    x = static.data("x", shape=(3,), dtype="float64")
    y = f(x, W)
    g = autograd.grad(y, x)
    g = g[0] if isinstance(g, (list, tuple)) else g
    value, gradient = static.Executor().run(feed={"x": X}, fetch_list=[y, g])
  finally:
    static.disable_static()
  np.testing.assert_allclose(value, f(X, W), rtol=1e-12)
  np.testing.assert_allclose(gradient, primc.jacfwd(f)(X, W), rtol=1e-10, atol=1e-12)
