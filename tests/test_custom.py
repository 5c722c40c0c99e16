"""custom_jvp and custom_vjp: the user's rule is the one every transform uses, in every
path (interpreted, jit, vmap, the eager tape, the static program), at every order.

Oracles: the rules' formulas written in numpy, finite differences in float64 where the rule
is the true derivative, and the transpose identity between a custom_jvp's forward and
reverse modes."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

R = np.random.default_rng(5)


@primc.custom_jvp
def log1pexp(x):
  return pnp.log(1.0 + pnp.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return log1pexp(x), t * (1.0 - 1.0 / (1.0 + pnp.exp(x)))  # stable where exp(x) overflows


def _sigmoid(x):
  return 1 / (1 + np.exp(-x))


@primc.custom_jvp
def scaled_sin(x, y):
  """sin(x) * y with a rule that is deliberately not its derivative (3x its x part), so a
  test can tell the rule ran."""
  return pnp.sin(x) * y


@scaled_sin.defjvp
def _scaled_sin_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  return scaled_sin(x, y), 3.0 * pnp.cos(x) * y * tx + pnp.sin(x) * ty


@primc.custom_vjp
def clip_gradient(x, lo, hi):
  return x


def _clip_fwd(x, lo, hi):
  return x, (lo, hi)


def _clip_bwd(res, g):
  lo, hi = res
  return pnp.clip(g, lo, hi), None, None


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@primc.custom_vjp
def cube(x):
  return x * x * x


def _cube_fwd(x):
  return cube(x), x


def _cube_bwd(x, g):
  return (3.0 * x * x * g,)  # the true derivative: higher orders differentiate bwd


cube.defvjp(_cube_fwd, _cube_bwd)


def test_custom_jvp_values_and_the_rule_at_every_order():
  x = np.array([-3.0, 0.5, 40.0, 800.0])  # exp(800) overflows: the naive derivative is nan
  np.testing.assert_allclose(log1pexp(x[:3]), np.log1p(np.exp(x[:3])), rtol=1e-12)
  want = _sigmoid(x)
  g = primc.grad(lambda x: pnp.sum(log1pexp(x)))
  for got in (
    g(x),
    primc.jit(g)(x),
    primc.vmap(primc.grad(log1pexp))(x),
    primc.jacfwd(log1pexp)(x).diagonal(),
    primc.jacrev(log1pexp)(x).diagonal(),
  ):
    np.testing.assert_allclose(got, want, rtol=1e-12)
  # second order differentiates the rule: d sigmoid = sigmoid (1 - sigmoid)
  h = primc.grad(primc.grad(log1pexp))
  for got in (primc.vmap(h)(x[:3]), primc.jit(primc.vmap(h))(x[:3])):
    np.testing.assert_allclose(got, want[:3] * (1 - want[:3]), rtol=1e-10, atol=1e-15)


def test_batched_functions_whose_rules_call_them():
  # vmap of the function itself (its call batched, then differentiated): the rules of
  # log1pexp and cube call their own function, whose batching once batched the rule again
  # without end (RecursionError)
  x = R.standard_normal((3, 4))
  want = np.log1p(np.exp(x))
  for f in (primc.vmap(log1pexp), primc.jit(primc.vmap(log1pexp))):
    np.testing.assert_allclose(f(x), want, rtol=1e-12)
  for f in (
    primc.grad(lambda x: pnp.sum(primc.vmap(log1pexp)(x))),
    primc.jit(primc.grad(lambda x: pnp.sum(primc.vmap(log1pexp)(x)))),
  ):
    np.testing.assert_allclose(f(x), _sigmoid(x), rtol=1e-12)
  primc.check_grads(lambda x: primc.vmap(log1pexp)(x) * x, (x,), order=2)
  g = primc.grad(lambda x: pnp.sum(primc.vmap(cube)(x)))
  for got in (g(x), primc.jit(g)(x)):
    np.testing.assert_allclose(got, 3 * x * x, rtol=1e-12)
  primc.check_grads(lambda x: primc.vmap(cube)(x), (x,), order=2, modes=("rev",))


def test_custom_jvp_rule_is_used_not_the_function():
  x, y = R.standard_normal(3), R.standard_normal(3)
  tx, ty = R.standard_normal(3), R.standard_normal(3)
  rule = 3 * np.cos(x) * y * tx + np.sin(x) * ty
  _, t = primc.jvp(scaled_sin, (x, y), (tx, ty))
  np.testing.assert_allclose(t, rule, rtol=1e-12)
  # reverse mode is the rule transposed: <vjp(ct), t> == <ct, jvp(t)>
  ct = R.standard_normal(3)
  _, pullback = primc.vjp(scaled_sin, x, y)
  cx, cy = pullback(ct)
  np.testing.assert_allclose(np.dot(cx, tx) + np.dot(cy, ty), np.dot(ct, rule), rtol=1e-10)
  gx = primc.jit(primc.grad(lambda x, y: pnp.sum(scaled_sin(x, y)), argnums=(0, 1)))(x, y)
  np.testing.assert_allclose(gx[0], 3 * np.cos(x) * y, rtol=1e-12)
  np.testing.assert_allclose(gx[1], np.sin(x), rtol=1e-12)


def test_custom_jvp_true_rule_passes_finite_differences():
  x = R.standard_normal((2, 3))
  primc.check_grads(lambda x: log1pexp(x) * x, (x,), order=2, modes=("fwd", "rev"))


def test_custom_vjp_bwd_is_used_in_reverse_mode_every_path():
  x = np.array([-2.0, 0.5, 3.0])
  f = lambda x: pnp.sum(clip_gradient(x * 10.0, -1.0, 1.0))  # d/dx would be 10
  want = np.clip(np.full(3, 1.0), -1, 1) * 10.0  # bwd clips the cotangent 1 -> 1, then x10
  g = primc.grad(f)
  for got in (
    g(x),
    primc.jit(g)(x),
    primc.vmap(primc.grad(lambda x: clip_gradient(x * 10.0, -1.0, 1.0)))(x),
  ):
    np.testing.assert_allclose(got, want, rtol=1e-12)
  f2 = lambda x: pnp.sum(clip_gradient(x, -0.5, 0.5) * 4.0)  # cotangent 4 clipped to 0.5
  np.testing.assert_allclose(primc.grad(f2)(x), np.full(3, 0.5), rtol=1e-12)


def test_custom_vjp_higher_orders_differentiate_bwd():
  x = np.array([0.5, -1.5, 2.0])
  np.testing.assert_allclose(cube(x), x**3, rtol=1e-12)
  g2 = primc.grad(lambda x: pnp.sum(primc.grad(lambda x: pnp.sum(cube(x)))(x)))
  np.testing.assert_allclose(g2(x), 6 * x, rtol=1e-12)
  np.testing.assert_allclose(primc.jit(g2)(x), 6 * x, rtol=1e-12)
  np.testing.assert_allclose(primc.jacrev(cube)(x), np.diag(3 * x * x), rtol=1e-12)


def test_custom_vjp_forward_mode_is_a_clear_error():
  with pytest.raises(primc.PrimcError, match="custom_vjp.*cube.*reverse-mode rule only"):
    primc.jvp(cube, (np.ones(2),), (np.ones(2),))
  with pytest.raises(primc.PrimcError, match="reverse-mode rule only"):
    primc.jit(primc.jacfwd(cube))(np.ones(2))


def test_closing_over_a_differentiated_value_is_an_error():
  def f(x):
    @primc.custom_jvp
    def g(y):
      return y * x

    g.defjvp(lambda p, t: (g(*p), t[0] * x))
    return pnp.sum(g(np.ones(2)))

  with pytest.raises(primc.PrimcError, match="enclosing scope"):
    primc.grad(f)(np.ones(2))


def test_rule_errors_name_the_function():
  @primc.custom_jvp
  def f(x):
    return x

  with pytest.raises(primc.PrimcError, match="no rule"):
    f(np.ones(2))
  f.defjvp(lambda p, t: (f(*p), (t[0], t[0])))
  with pytest.raises(primc.PrimcError, match="jvp rule of .*f returned"):
    primc.jvp(f, (np.ones(2),), (np.ones(2),))


def test_nondiff_argnums_pass_python_values_first():
  def power(n, x):
    return x**n

  f = primc.custom_jvp(power, nondiff_argnums=(0,))
  f.defjvp(lambda n, p, t: (f(n, *p), n * p[0] ** (n - 1) * t[0]))
  x = np.array([1.5, 2.0])
  np.testing.assert_allclose(primc.grad(lambda x: pnp.sum(f(3, x)))(x), 3 * x**2)
  np.testing.assert_allclose(primc.jit(primc.grad(lambda x: pnp.sum(f(4, x))))(x), 4 * x**3)


def test_eager_tape_uses_the_rule():
  x = np.array([1.0, 800.0])
  t = primc.to_tensor(x, stop_gradient=False)
  y = log1pexp(t)
  (g,) = primc.eager.grad([y.sum()], [t])
  np.testing.assert_allclose(g.numpy(), _sigmoid(x), rtol=1e-12)
  c = primc.to_tensor(np.array([0.5, 2.0]), stop_gradient=False)
  (gc,) = primc.eager.grad([(clip_gradient(c, -1.0, 1.0) * 5.0).sum()], [c])
  np.testing.assert_allclose(gc.numpy(), [1.0, 1.0])


def test_static_program_uses_the_rule():
  from primc import autograd, static

  static.enable_static()
  try:
    static.reset()
    x = static.data("x", shape=(2,), dtype="float64")
    (g,) = autograd.grad([pnp.sum(log1pexp(x))], [x])
    got = static.Executor().run(feed={"x": np.array([1.0, 800.0])}, fetch_list=[g])[0]
  finally:
    static.disable_static()
  np.testing.assert_allclose(got, _sigmoid(np.array([1.0, 800.0])), rtol=1e-12)


class _CusTanh(primc.eager.PyLayer):
  """Paddle's documented example, with a factor in backward so a test sees it ran."""

  @staticmethod
  def forward(ctx, x, func=pnp.tanh, scale=1.0):
    y = func(x)
    ctx.save_for_backward(y)
    ctx.scale = scale
    return y

  @staticmethod
  def backward(ctx, dy):
    (y,) = ctx.saved_tensor()
    return dy * (1 - pnp.square(y)) * ctx.scale


def test_pylayer_backward_is_used_by_the_tape_jit_and_grad():
  x = np.array([0.3, -1.2, 2.0])
  want = (1 - np.tanh(x) ** 2) * 3.0
  t = primc.to_tensor(x, stop_gradient=False)
  (g,) = primc.eager.grad([_CusTanh.apply(t, scale=3.0).sum()], [t])
  np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
  t2 = primc.to_tensor(x, stop_gradient=False)
  _CusTanh.apply(t2, pnp.tanh, 3.0).sum().backward()
  np.testing.assert_allclose(t2.grad.numpy(), want, rtol=1e-12)
  f = lambda x: pnp.sum(_CusTanh.apply(x, scale=3.0))
  np.testing.assert_allclose(primc.grad(f)(x), want, rtol=1e-12)
  np.testing.assert_allclose(primc.jit(primc.grad(f))(x), want, rtol=1e-12)
  # second order differentiates backward: d/dx [(1 - tanh^2) * 3] = -6 tanh (1 - tanh^2)
  h = primc.grad(lambda x: pnp.sum(primc.grad(f)(x)))(x)
  np.testing.assert_allclose(h, -6 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-10)
  with pytest.raises(primc.PrimcError, match="reverse-mode rule only"):
    primc.jvp(f, (x,), (x,))


def test_pylayer_gradient_count_is_checked():
  class Bad(primc.eager.PyLayer):
    @staticmethod
    def forward(ctx, x, y):
      return x * y

    @staticmethod
    def backward(ctx, g):
      return g

  with pytest.raises(primc.PrimcError, match="1 gradients for 2 tensor arguments"):
    primc.grad(lambda x: pnp.sum(Bad.apply(x, x)))(np.ones(2))


def _custom_case(two_outputs: bool, residuals: str):
  """A custom_vjp function of a Python factor and two arrays, whose bwd is deliberately
  not its derivative (twice its x part; none for y where `residuals` is "none"), with an
  integer second output where `two_outputs`, and residuals as a tuple, a dict or none."""

  @functools.partial(primc.custom_vjp, nondiff_argnums=(0,))
  def f(scale, x, y):
    out = pnp.sin(x) * y * scale
    return (out, pnp.sum(x > 0)) if two_outputs else out

  def fwd(scale, x, y):
    res = {"tuple": (x, y), "dict": {"y": y, "x": x}, "none": (x,)}[residuals]
    return f(scale, x, y), res

  def bwd(scale, res, g):
    g = g[0] if two_outputs else g
    x = res[0] if residuals != "dict" else res["x"]
    dx = 2.0 * g * pnp.cos(x) * scale * (res[1] if residuals == "tuple" else 1.0)
    if residuals == "dict":
      dx = dx * res["y"]
    return dx, (None if residuals == "none" else g * pnp.sin(x) * scale)

  f.defvjp(fwd, bwd)
  return f


def _count_kinds(m, made: list) -> None:
  """Appends the primitive of every kind the tape makes (`tape._programs`) to `made`."""
  from primc import tape

  real = tape._programs
  m.setattr(tape, "_programs", lambda eqn, active: made.append(eqn.prim.name) or real(eqn, active))


@settings(max_examples=30, deadline=None)
@given(
  dtype=st.sampled_from(["float32", "float64"]),
  shape=st.sampled_from([(), (3,), (2, 3)]),
  two_outputs=st.booleans(),
  residuals=st.sampled_from(["tuple", "dict", "none"]),
  seed=st.integers(0, 2**16),
)
def test_custom_vjp_on_the_tape_runs_its_rules_on_values(
  dtype, shape, two_outputs, residuals, seed
):
  """`primc.vjp` on values runs a custom_vjp's fwd and bwd on the values (no program of
  its equation is linearized, at any call: its rules are new at every call) and gives
  what the vjp staged into `jit` gives (the same rules, traced), in the arguments'
  dtypes, and the rule's formula."""
  rng = np.random.default_rng(seed)
  x, y = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
  f = _custom_case(two_outputs, residuals)
  h = lambda x, y: pnp.sum(f(1.5, x * 2.0, y) if not two_outputs else f(1.5, x * 2.0, y)[0]) * 3.0
  made = []
  with pytest.MonkeyPatch.context() as m:
    _count_kinds(m, made)
    for _ in range(2):  # (the second call: its kinds kept, the custom call's still not)
      out, pull = primc.vjp(h, x, y)
      got = pull(np.asarray(1.0, dtype))
  assert "custom_vjp_call" not in made
  want = primc.jit(lambda x, y: primc.vjp(h, x, y)[1](np.asarray(1.0, dtype)))(x, y)
  tol = 1e-5 if dtype == "float32" else 1e-12
  xx = x * 2.0
  dx = 3.0 * 2.0 * np.cos(xx) * 1.5 * 2.0 * (y if residuals != "none" else 1.0)
  dy = np.zeros_like(y) if residuals == "none" else 3.0 * np.sin(xx) * 1.5
  for g, w, formula in zip(got, want, (dx, dy)):
    assert g.dtype == np.dtype(dtype) and g.shape == shape
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    np.testing.assert_allclose(g, formula, rtol=tol, atol=tol)


def test_autograd_primitive_in_a_loop_of_vjps_makes_no_program_of_its_rule():
  """An autograd-style `@primitive` with `defvjp` under `primc.vjp` on values, called
  again and again (as `check_grads` calls it): its fwd and bwd run on the values; what
  the tape makes is its other equations' kinds, once."""
  from primc.extend import defvjp, primitive

  @primitive
  def logsumexp(x):
    m = pnp.max(x)
    return m + pnp.log(pnp.sum(pnp.exp(x - m)))

  defvjp(logsumexp, lambda ans, x: lambda g: pnp.full(x.shape, g) * pnp.exp(x - ans))
  f = lambda y: pnp.sum(logsumexp(y**2))
  made = []
  y = np.random.default_rng(0).standard_normal(10)
  z = y**2
  want = 2 * y * np.exp(z - z.max()) / np.sum(np.exp(z - z.max()))
  with pytest.MonkeyPatch.context() as m:
    _count_kinds(m, made)
    for _ in range(3):
      (g,) = primc.vjp(f, y)[1](1.0)
      np.testing.assert_allclose(g, want, rtol=1e-13)  # (float64 throughout)
  assert "custom_vjp_call" not in made and len(made) == len(set(made))


def test_a_vjp_on_values_says_a_closure_is_differentiated():
  def f(x):
    @primc.custom_vjp
    def g(y):
      return y * x

    g.defvjp(lambda y: (g(y), ()), lambda res, ct: (ct,))
    return pnp.sum(g(np.ones(2)))

  with pytest.raises(primc.PrimcError, match="enclosing scope"):
    primc.vjp(f, np.ones(2))[1](1.0)


def test_custom_functions_on_plain_values_run_as_they_are(monkeypatch):
  """On plain values outside every transform no rule applies: a custom_jvp or custom_vjp
  function runs its own body (JAX's do), binding no custom call (it once traced the
  function at every call: scipy.stats' gamma.logpdf, whose xlogy is one, 397 us against
  scipy's 34), with what the transforms' path gives; its rules still run under `grad`."""
  from primc import core

  @primc.custom_jvp
  def softplus(x):
    return pnp.log1p(pnp.exp(x))

  softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * 0.5))  # (a rule that is not the truth)

  @primc.custom_vjp
  def double(x, y):
    return 2.0 * x * y

  double.defvjp(lambda x, y: (double(x, y), (x, y)), lambda r, g: (3.0 * g, None))
  x, y = np.linspace(-2.0, 2.0, 5), np.full(5, 0.5)
  seen = []
  binder = core.binder[0]

  def counting(prim, args, params):
    seen.append(prim)
    return binder(prim, args, params)

  monkeypatch.setattr(core, "binder", [counting])
  got = softplus(x), double(x, y)
  assert seen == []  # (nor traced: its body's ops ran numpy's functions)
  monkeypatch.undo()
  np.testing.assert_allclose(got[0], primc.jit(softplus)(x), rtol=1e-15)
  np.testing.assert_allclose(got[1], primc.jit(double)(x, y), rtol=1e-15)
  assert primc.grad(lambda x: pnp.sum(softplus(x)))(x) == pytest.approx(np.full(5, 0.5))
  assert primc.grad(lambda x: pnp.sum(double(x, y)))(x) == pytest.approx(np.full(5, 3.0))
