"""Products multiply in numpy's order, left to right along the reduced axes, so a float32
product that overflows or underflows on the way gives numpy's inf, 0 or NaN (a product by
halving, pairs first, gave NaN where numpy gives inf). Oracle: numpy itself, bit for bit,
in every path: interpreted, jit, jit(vmap), the eager tape and static programs. The
derivative (the product of the others, no division) is checked by finite differences in
float64, with zeros among the factors, at orders 1 and 2."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import eager, static

# magnitudes whose products leave float32's range on the way (1e30 * 1e30 = inf,
# 1e-30 * 1e-30 = 0), so the order decides between inf, 0, NaN and a finite value
MAGNITUDES = [1e-30, 1e-20, 0.5, 1.0, 3.0, 1e20, 1e30, np.inf, 0.0]


@st.composite
def products(draw):
  ndim = draw(st.integers(1, 3))
  shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
  size = int(np.prod(shape))
  mags = draw(st.lists(st.sampled_from(MAGNITUDES), min_size=size, max_size=size))
  signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=size, max_size=size))
  x = (np.array(mags) * np.array(signs)).astype(np.float32).reshape(shape)
  axis = draw(
    st.one_of(
      st.none(),
      st.integers(-ndim, ndim - 1),
      st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple),
    )
  )
  return x, axis, draw(st.booleans())


def _same(got, want, path):
  got = np.asarray(got)
  assert got.dtype == want.dtype and got.shape == want.shape, (path, got.dtype, got.shape)
  assert np.array_equal(got, want, equal_nan=True), (path, got, want)


def _static(f, x):
  static.enable_static()
  try:
    static.reset()
    v = static.data("x", shape=x.shape, dtype="float32")
    (value,) = static.Executor().run(feed={"x": x}, fetch_list=[f(v)])
  finally:
    static.disable_static()
  return value


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(products())
def test_float32_products_are_numpy_products_in_every_path(case):
  x, axis, keepdims = case
  f = lambda a: pnp.prod(a, axis=axis, keepdims=keepdims)
  with np.errstate(all="ignore"):
    want = np.prod(x, axis=axis, keepdims=keepdims)
    _same(primc.interpret(primc.make_program(f)(x), x)[0], want, "interpreted")
    _same(primc.jit(f)(x), want, "jit")
    batched = primc.jit(primc.vmap(f))(np.stack([x, x[::-1]]))
    _same(batched[0], want, "jit(vmap)")
    _same(batched[1], np.prod(x[::-1], axis=axis, keepdims=keepdims), "jit(vmap)")
    _same(f(eager.to_tensor(x)).value, want, "eager")
    _same(_static(f, x), want, "static")


@pytest.mark.parametrize("name", ["nanprod", "prod_where", "prod_initial"])
def test_product_variants_keep_numpy_order(name):
  x = np.array([[1e30, 1e30, 1e-30, np.nan], [-1e-30, np.inf, -1e-30, 2.0]], np.float32)
  mask = np.array([True, True, True, False])
  ours, theirs = {
    "nanprod": (lambda a: pnp.nanprod(a, axis=1), lambda a: np.nanprod(a, axis=1)),
    "prod_where": (
      lambda a: pnp.prod(a, axis=1, where=mask),
      lambda a: np.prod(a, axis=1, where=mask),
    ),
    "prod_initial": (
      lambda a: pnp.prod(a, axis=1, initial=1e-30),
      lambda a: np.prod(a, axis=1, initial=1e-30),
    ),
  }[name]
  with np.errstate(all="ignore"):
    want = theirs(x)
    _same(primc.jit(ours)(x), want, "jit")
    _same(primc.interpret(primc.make_program(ours)(x), x)[0], want, "interpreted")


def _fd(f, x, eps=1e-6):
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[i] = eps
    g[i] = (f(x + e) - f(x - e)) / (2 * eps)
  return g


@pytest.mark.parametrize("zeros", [0, 2])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_product_derivatives_with_zeros_by_finite_differences(axis, zeros):
  x = np.random.default_rng(zeros).uniform(0.5, 1.5, (3, 4, 2))
  x.reshape(-1)[[5, 13][:zeros]] = 0.0
  f = lambda a: pnp.sum(pnp.sin(pnp.prod(a, axis=axis)))
  g = primc.grad(f)
  np.testing.assert_allclose(primc.jit(g)(x), _fd(lambda a: float(f(a)), x), atol=1e-7)
  np.testing.assert_allclose(g(x), primc.jit(g)(x), rtol=1e-12, atol=1e-14)
  first = lambda a: primc.grad(f)(a).reshape(-1)[7]
  want = _fd(lambda a: float(first(a)), x)
  np.testing.assert_allclose(primc.jit(primc.grad(first))(x), want, atol=1e-6)


@st.composite
def accumulations(draw):
  """An array of the magnitudes above (and large sums: 3e38 + 3e38 = inf in float32), an
  axis (or None: flattened) and the function, cumsum or cumprod."""
  ndim = draw(st.integers(1, 3))
  shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
  size = int(np.prod(shape))
  mags = draw(st.lists(st.sampled_from([*MAGNITUDES, 3e38]), min_size=size, max_size=size))
  signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=size, max_size=size))
  x = (np.array(mags) * np.array(signs)).astype(np.float32).reshape(shape)
  axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
  return x, axis, draw(st.sampled_from(["cumsum", "cumprod"]))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(accumulations())
def test_cumulative_sums_and_products_are_numpys_in_every_path(case):
  """cumsum and cumprod accumulate left to right, as numpy does, in every path: a doubling
  scan (pairs first) gave NaN for [0, 1e30, 1e30] and 0 for [1e30, 1e-30, 1e-30]."""
  x, axis, name = case
  f = lambda a: getattr(pnp, name)(a, axis=axis)
  with np.errstate(all="ignore"):
    want = getattr(np, name)(x, axis=axis)
    _same(primc.interpret(primc.make_program(f)(x), x)[0], want, "interpreted")
    _same(primc.jit(f)(x), want, "jit")
    batched = primc.jit(primc.vmap(f))(np.stack([x, x[::-1]]))
    _same(batched[0], want, "jit(vmap)")
    _same(batched[1], getattr(np, name)(x[::-1], axis=axis), "jit(vmap)")
    _same(f(eager.to_tensor(x)).value, want, "eager")
    _same(_static(f, x), want, "static")


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumulative_derivatives_by_finite_differences(name):
  rng = np.random.default_rng(3)
  x = rng.uniform(0.5, 1.5, (3, 5)) * rng.choice([-1.0, 1.0], (3, 5))
  x[1, 2] = 0.0  # (a zero among the factors: no division in cumprod's derivative)
  for axis in (0, 1, None):
    primc.check_grads(lambda a: getattr(pnp, name)(a, axis=axis), (x,), order=2)
