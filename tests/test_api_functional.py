"""The functional API on the seeds' numbers and against finite differences."""

import os
import sys

import numpy as np
import pytest

import primc
import primc.numpy as pnp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import seed_programs as seeds  # noqa: E402


def test_seed_tanh_derivatives_at_one():
  d1, d2, d3 = seeds.tanh_derivatives(np.ones((1,), np.float32))
  assert d1.dtype == np.float32
  np.testing.assert_allclose([d1[0], d2[0], d3[0]], [0.41997433, -0.6397, 0.6216267], rtol=1e-6)


def test_seed_tanh_derivatives_match_closed_forms(rng):
  x = rng.standard_normal(7)
  t = np.tanh(x)
  d1, d2, d3 = seeds.tanh_derivatives(x)
  np.testing.assert_allclose(d1, 1 - t**2, rtol=1e-12)
  np.testing.assert_allclose(d2, -2 * t * (1 - t**2), rtol=1e-12)
  np.testing.assert_allclose(d3, (1 - t**2) * (6 * t**2 - 2), rtol=1e-12, atol=1e-14)


def test_seed_mynet_loss_and_its_gradient_match_finite_differences(rng):
  x, w, b = rng.random((2, 2)), rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
  primc.check_grads(lambda w, b: seeds.mynet_loss(x, w, b), (w, b), order=1)
  gw, gb = primc.grad(seeds.mynet_loss, argnums=(1, 2))(x, w, b)
  eps = 1e-6
  for k in np.ndindex(2, 2):
    e = np.zeros((2, 2))
    e[k] = eps
    fd_w = (seeds.mynet_loss(x, w + e, b) - seeds.mynet_loss(x, w - e, b)) / (2 * eps)
    fd_b = (seeds.mynet_loss(x, w, b + e) - seeds.mynet_loss(x, w, b - e)) / (2 * eps)
    np.testing.assert_allclose(gw[k], fd_w, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb[k], fd_b, rtol=1e-6, atol=1e-8)


def _composition(w1, w2):
  return lambda x: pnp.sin(pnp.tanh(x @ w1) @ w2) * pnp.exp(-(x[:2] ** 2)).sum()


def test_jacfwd_equals_jacrev_on_compositions(rng):
  for seed in range(3):
    r = np.random.default_rng(seed)
    w1, w2, x = r.standard_normal((4, 3)), r.standard_normal((3, 2)), r.standard_normal(4)
    f = _composition(w1, w2)
    jf, jr = primc.jacfwd(f)(x), primc.jacrev(f)(x)
    assert jf.shape == (2, 4)
    np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(4)], -1)
    np.testing.assert_allclose(jf, fd, rtol=1e-6, atol=1e-8)


def test_jacobian_of_matrix_input_and_multiple_argnums(rng):
  x, y = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
  jx, jy = primc.jacrev(pnp.multiply, argnums=(0, 1))(x, y)
  assert jx.shape == (2, 3, 2, 3)
  np.testing.assert_allclose(jx.reshape(6, 6), np.diag(y.ravel()))
  np.testing.assert_allclose(jy.reshape(6, 6), np.diag(x.ravel()))
  jfx, jfy = primc.jacfwd(pnp.multiply, argnums=(0, 1))(x, y)
  np.testing.assert_allclose(jfx, jx)
  np.testing.assert_allclose(jfy, jy)


def test_jacrev_of_single_element_outputs(rng):
  # one cotangent, pulled back without a batch dimension: shapes as for any output
  w, x = rng.standard_normal((3, 4)), rng.standard_normal(4)
  for f, out_shape in (
    (lambda x: pnp.sum(pnp.tanh(w @ x)), ()),
    (lambda x: pnp.reshape(pnp.sum(pnp.tanh(w @ x)), (1, 1)), (1, 1)),
  ):
    j = primc.jacrev(f)(x)
    assert j.shape == out_shape + (4,)
    np.testing.assert_allclose(j.reshape(4), primc.jacfwd(f)(x).reshape(4), rtol=1e-12)
    eps = 1e-6
    fd = [(np.sum(f(x + eps * e)) - np.sum(f(x - eps * e))) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(j.reshape(4), fd, rtol=1e-6, atol=1e-8)


def test_hessian_equals_jacfwd_of_jacrev_and_is_symmetric(rng):
  w = rng.standard_normal((4, 4))
  f = lambda x: pnp.sum(pnp.tanh(w @ pnp.tanh(w @ x))) + pnp.sum(x**3)
  x = rng.standard_normal(4)
  h = primc.hessian(f)(x)
  np.testing.assert_allclose(h, primc.jacfwd(primc.jacrev(f))(x), rtol=1e-12)
  np.testing.assert_allclose(h, primc.jacrev(primc.jacfwd(f))(x), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
  v = rng.standard_normal(4)
  (hv,) = primc.hvp(f, (x,), (v,))
  np.testing.assert_allclose(hv, h @ v, rtol=1e-10)


def test_grad_options():
  x, y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
  f = lambda x, y: pnp.sum(x**2 + 4 * y)  # the seed's eager example
  gx, gy = primc.grad(f, argnums=(0, 1))(x, y)
  np.testing.assert_allclose(gx, [2, 4, 6])
  np.testing.assert_allclose(gy, [4, 4, 4])
  g, aux = primc.grad(lambda x: (pnp.sum(x**2), x * 3), has_aux=True)(x)
  np.testing.assert_allclose(g, 2 * x)
  np.testing.assert_allclose(aux, 3 * x)
  (v, aux), g = primc.value_and_grad(lambda x: (pnp.sum(x**2), {"t": x}), has_aux=True)(x)
  assert v == 14 and set(aux) == {"t"}
  params = {"w": np.ones(3), "b": np.array(0.5)}
  gp = primc.grad(lambda p, x: pnp.sum(p["w"] * x) + p["b"])(params, x)
  np.testing.assert_allclose(gp["w"], x)
  np.testing.assert_allclose(gp["b"], 1.0)


def test_stop_gradient_and_non_differentiable_ops_give_zero():
  x = np.array([1.0, -2.0, 3.0])
  g = primc.grad(lambda x: pnp.sum(x * pnp.stop_gradient(x)))(x)
  np.testing.assert_allclose(g, x)  # only the first factor is differentiated
  g = primc.grad(lambda x: pnp.sum(pnp.sign(x) + pnp.where(x > 0, 1.0, 0.0)))(x)
  np.testing.assert_array_equal(g, 0)


def test_grad_errors():
  with pytest.raises(primc.PrimcError, match="one-element float output"):
    primc.grad(lambda x: x * 2)(np.ones(3))
  with pytest.raises(primc.PrimcError, match=r"has_aux=True\) needs"):
    primc.grad(lambda x: pnp.sum(x), has_aux=True)(np.ones(3))
  with pytest.raises(primc.PrimcError, match="argnums"):
    primc.grad(lambda x: pnp.sum(x), argnums=2)(np.ones(3))


def test_jvp_vjp_linearize_agree(rng):
  w = rng.standard_normal((3, 3))
  f = lambda x: pnp.tanh(w @ x) * x
  x, t, c = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3)
  y, jt = primc.jvp(f, (x,), (t,))
  y2, f_jvp = primc.linearize(f, x)
  y3, pull = primc.vjp(f, x)
  np.testing.assert_allclose(y, f(x))
  np.testing.assert_allclose(y2, y)
  np.testing.assert_allclose(f_jvp(t), jt, rtol=1e-12)
  np.testing.assert_allclose(np.vdot(pull(c)[0], t), np.vdot(c, jt), rtol=1e-12)


def test_closures_over_outer_tracers_are_constants():
  # d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x: no perturbation confusion.
  f = lambda x: x * primc.grad(lambda y: pnp.sum(x * y))(np.ones(()))
  np.testing.assert_allclose(primc.grad(f)(np.array(3.0)), 6.0)


def test_make_program_prints_derivatives_at_any_order():
  f = lambda x: pnp.tanh(x).sum()
  counts = []
  for _ in range(4):
    program = primc.make_program(f)(np.ones(1, np.float32))
    primc.typecheck(program)
    counts.append(len(program.eqns))
    f = (lambda h: lambda x: primc.grad(h)(x).sum())(f)
  assert counts[0] == 2 and all(a < b for a, b in zip(counts, counts[1:]))
  assert "tanh" in str(program)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_check_grads_catches_a_wrong_rule(order, monkeypatch):
  from primc import ad
  from primc import prims as P

  primc.check_grads(pnp.sin, (np.array([0.3, 1.2]),), order=order)
  monkeypatch.setitem(
    ad.jvp_rules, P.sin_p, lambda xs, ts: (P.sin(xs[0]), P.mul(ts[0], P.sin(xs[0])))
  )
  with pytest.raises(AssertionError, match="mismatch"):
    primc.check_grads(pnp.sin, (np.array([0.3, 1.2]),), order=order)


@pytest.mark.parametrize("dtype", ["float32", None, "float64"])
def test_check_grads_says_where_a_float64_function_computes_in_float32(dtype):
  """A float64 argument written into a float32 array: the check at float64's step fails,
  and says where precision drops; with the array float64 (numpy's default, or asked
  for), it passes at every order."""

  def f(x):
    z = pnp.zeros(3) if dtype is None else pnp.zeros(3, dtype=dtype)
    z[:] = pnp.sin(x) * 100.0
    return pnp.sum(z * z)

  x = np.linspace(0.1, 0.9, 3)
  if dtype != "float32":
    primc.check_grads(f, (x,), order=2)
    return
  with pytest.raises(AssertionError, match="mismatch") as e:
    primc.check_grads(f, (x,))
  assert "computes in float32 from full at" in str(e.value)
  assert __file__ in str(e.value) and "dtype='float64'" in str(e.value)


def test_check_grads_directions_are_generic_and_the_same_for_a_seed():
  """`checking.Directions`: uniform on [-1, 1) (its mean and variance, each sign about
  half the time), the same stream for a seed, another for another seed, a dtype's."""
  from primc.checking import Directions

  draws = Directions(7).draw((20000,), np.float64)
  assert draws.min() >= -1.0 and draws.max() < 1.0
  assert abs(draws.mean()) < 0.02 and abs(draws.var() - 1 / 3) < 0.01
  assert abs((draws > 0).mean() - 0.5) < 0.02
  assert len(np.unique(draws)) == draws.size
  one, again = Directions(7), Directions(7)
  np.testing.assert_array_equal(one.draw((2, 3), np.float64), again.draw((2, 3), np.float64))
  assert (one.draw((4,), np.float64) != Directions(8).draw((4,), np.float64)).all()
  assert Directions(0).draw((), np.float32).dtype == np.float32
