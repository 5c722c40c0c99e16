"""`primc.extend` (autograd's `primitive` and `defvjp`): the user's rule is the gradient in
every path, a rule that is not the true derivative included; higher orders differentiate
the rule; a call on plain values runs the function."""

import math

import numpy as np

import primc
import primc.numpy as pnp
from primc.extend import defvjp, primitive


@primitive
def logsumexp(x):
  m = pnp.max(x)
  return m + pnp.log(pnp.sum(pnp.exp(x - m)))


defvjp(logsumexp, lambda ans, x: lambda g: g * pnp.exp(x - ans))


@primitive
def clipped(x, scale, lo=-0.5):
  """The identity times `scale`; its rule clips the cotangent (not the true derivative)."""
  return x * scale


defvjp(clipped, lambda ans, x, scale, lo=-0.5: lambda g: pnp.clip(g, lo, 0.5), None)


def test_the_rule_is_the_gradient_in_every_path():
  f = lambda x: pnp.sum(clipped(x, 3.0) * 2.0)  # true derivative 6; the rule: clip(2) = 0.5
  x = np.array([0.1, -0.2, 0.3])
  want = np.full(3, 0.5)
  np.testing.assert_array_equal(primc.grad(f)(x), want)
  np.testing.assert_array_equal(primc.jit(primc.grad(f))(x), want)
  np.testing.assert_array_equal(primc.vmap(primc.grad(lambda v: clipped(v, 3.0) * 2.0))(x), want)
  t = primc.to_tensor(x, stop_gradient=False)
  pnp.sum(clipped(t, 3.0) * 2.0).backward()
  np.testing.assert_array_equal(np.asarray(t.grad.numpy()), want)


def test_keywords_pass_through_and_an_argument_without_a_rule_gets_none():
  g = primc.grad(lambda x: pnp.sum(clipped(x, 3.0, lo=-0.1) * -2.0))(np.ones(2))
  np.testing.assert_array_equal(g, np.full(2, -0.1))
  gs = primc.grad(lambda s: pnp.sum(clipped(np.ones(2), s)))(3.0)  # no rule for `scale`
  assert gs == 0.0


def test_values_and_derivatives_of_every_order():
  y = np.random.default_rng(0).standard_normal(10)
  z = y**2
  np.testing.assert_allclose(logsumexp(z), np.log(np.sum(np.exp(z))), rtol=1e-14)
  g = primc.grad(lambda y: logsumexp(y**2))(y)
  np.testing.assert_allclose(g, 2 * y * np.exp(z - np.log(np.sum(np.exp(z)))), rtol=1e-12)
  a = 0.3  # d2/da2 logsumexp([a, 2a]) = (e^a + 4e^2a)/s - (e^a + 2e^2a)^2/s^2
  e1, e2 = math.exp(a), math.exp(2 * a)
  s, n = e1 + e2, e1 + 2 * e2
  d2 = primc.grad(primc.grad(lambda a: logsumexp(pnp.stack([a, 2 * a]))))(a)
  np.testing.assert_allclose(d2, (e1 + 4 * e2) / s - n * n / s**2, rtol=1e-12)


def test_a_call_on_plain_values_runs_the_function():
  ran = []

  @primitive
  def f(x):
    ran.append(type(x))
    return np.sort(x)  # numpy's own: fine on values

  defvjp(f, lambda ans, x: lambda g: g)
  np.testing.assert_array_equal(f(np.array([3.0, 1.0])), [1.0, 3.0])
  assert ran == [np.ndarray]
