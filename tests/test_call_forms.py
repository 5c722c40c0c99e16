"""How users call primc, against numpy and against primc's own single-argument results:
numpy's array_like operands (nested lists and tuples holding traced values), keyword
arguments passed through the transforms, argnums in any order and with repeats, autograd's
tensor-Jacobian products with a tensor over the leading output axes, and the edge cases
those calls reach (zero-size axes, reductions over one element). Every check runs eager
and under `jit`."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

R = np.random.default_rng(21)
PATHS = {"eager": lambda f: f, "jit": primc.jit}


# name -> (function of a numpy-like module and two scalars a, b, the reference value's
# derivative in (a, b) by hand)
ARRAY_LIKE = {
  "mean": (lambda m, a, b: m.mean([a, b * 2.0]), lambda a, b: (0.5, 1.0)),
  "sum_nested": (lambda m, a, b: m.sum([[a, 1.0], (b, a)]), lambda a, b: (2.0, 1.0)),
  "var": (lambda m, a, b: m.var([a, b]), lambda a, b: ((a - b) / 2, (b - a) / 2)),
  "std": (lambda m, a, b: m.std([a, b, 1.0]), None),
  "norm": (lambda m, a, b: m.linalg.norm([a, 3.0 * b]), None),
  "append": (lambda m, a, b: m.sum(m.append([a, b], [a]) ** 2), lambda a, b: (4 * a, 2 * b)),
  "where": (lambda m, a, b: m.sum(m.where([True, False], [a, a], [b, b])), lambda a, b: (1.0, 1.0)),
  "maximum": (lambda m, a, b: m.sum(m.maximum([a, b], 0.5)), None),
  "dot": (lambda m, a, b: m.dot([a, b], [b, 2.0]), lambda a, b: (b, a + 2.0)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ARRAY_LIKE)
def test_lists_of_traced_values_are_array_like(name, path):
  fn, by_hand = ARRAY_LIKE[name]
  a, b = 0.7, -1.3
  got = PATHS[path](lambda a, b: fn(pnp, a, b))(a, b)
  np.testing.assert_allclose(got, fn(np, a, b), rtol=1e-14)
  grads = PATHS[path](primc.grad(lambda a, b: fn(pnp, a, b), argnums=(0, 1)))(a, b)
  eps = 1e-6
  fd = [
    (fn(np, a + eps, b) - fn(np, a - eps, b)) / (2 * eps),
    (fn(np, a, b + eps) - fn(np, a, b - eps)) / (2 * eps),
  ]
  np.testing.assert_allclose(grads, fd, rtol=1e-7, atol=1e-9)
  if by_hand:
    np.testing.assert_allclose(grads, by_hand(a, b), rtol=1e-12)


def test_where_forms_match_numpy():
  cond = [True, False, True]
  x, y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
  np.testing.assert_array_equal(pnp.where(condition=cond, x=x, y=y), np.where(cond, x, y))
  np.testing.assert_array_equal(pnp.where(cond, x, y=y), np.where(cond, x, y))
  for got, want in zip(pnp.where(cond), np.where(cond), strict=True):
    np.testing.assert_array_equal(got, want)
  with pytest.raises(primc.PrimcError, match="both or neither"):
    pnp.where(cond, x)


def test_isinstance_of_ndarray_holds_for_traced_arrays():
  seen = []
  primc.grad(lambda x: seen.append(isinstance(x, pnp.ndarray)) or pnp.sum(x))(np.ones(2))
  assert seen == [True] and isinstance(np.ones(1), pnp.ndarray)
  assert not isinstance([1.0], pnp.ndarray) and not isinstance(1.0, pnp.ndarray)


EINSUM = [  # numpy's interleaved (operand, sublist, ..., [output]) form
  lambda a, b: (a, [0, 1], b, [1, 2]),
  lambda a, b: (a, [0, 1], b, [1, 2], [2, 0]),
  lambda a, b: (a, [Ellipsis, 1], [Ellipsis]),
  lambda a, b: (a, [0, 1], a, [0, 1], []),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("form", range(len(EINSUM)))
def test_einsum_sublist_form(form, path):
  a, b = R.standard_normal((3, 4)), R.standard_normal((4, 5))
  got = PATHS[path](lambda a, b: pnp.einsum(*EINSUM[form](a, b)))(a, b)
  np.testing.assert_allclose(got, np.einsum(*EINSUM[form](a, b)), rtol=1e-13)
  primc.check_grads(lambda a, b: pnp.einsum(*EINSUM[form](a, b)), (a, b), order=1)


@pytest.mark.parametrize("path", PATHS)
def test_zero_size_axes_match_numpy(path):
  """An index of size 0 is not a broadcast size-1 index (it was taken for one)."""
  x = R.standard_normal((5, 6, 4, 3))
  for offset in range(-7, 8):  # diagonals past the edge are empty: their traces are 0
    got = PATHS[path](lambda x: pnp.trace(x, offset=offset))(x)
    np.testing.assert_allclose(got, np.trace(x, offset=offset), rtol=1e-13)
    assert np.shape(got) == np.trace(x, offset=offset).shape
  g = primc.grad(lambda x: pnp.sum(pnp.trace(x, offset=6)))(x)
  np.testing.assert_array_equal(g, np.zeros_like(x))
  cases = [
    ("ij,jk->ik", np.ones((2, 0)), np.ones((0, 3))),
    ("i,i->", np.ones(0), np.ones(1)),
    ("ij->j", np.ones((0, 3))),
    ("...ii->...i", np.ones((2, 0, 0))),
  ]
  for subscripts, *ops in cases:
    got = PATHS[path](lambda *o: pnp.einsum(subscripts, *o))(*ops)
    want = np.einsum(subscripts, *ops)
    assert np.shape(got) == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", PATHS)
def test_std_over_single_elements_is_constant(path):
  """std over one element is the constant 0 (derivative 0, not sqrt's 0/0); with ddof=1
  numpy's value is nan."""
  for x, axis in ((np.float64(3.5), None), (R.standard_normal((1, 3)), 0)):
    g = PATHS[path](primc.grad(lambda x: pnp.sum(pnp.std(x, axis=axis))))(x)
    np.testing.assert_array_equal(g, np.zeros_like(x))
  primc.check_grads(lambda x: pnp.std(x, axis=1), (R.standard_normal((3, 4)),), order=2)
  with np.errstate(all="ignore"):
    assert np.isnan(pnp.std(np.ones(1), ddof=1)) and np.isnan(np.std(np.ones(1), ddof=1))


def _f(a, b, c, scale=1.0, shift=0.0):
  return pnp.sum(pnp.sin(a) * b**2 * pnp.exp(c)) * scale + shift


ARGS = (R.standard_normal(3), R.standard_normal(3), np.float64(0.4))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  argnums=st.lists(st.integers(0, 2), min_size=1, max_size=4),
  path=st.sampled_from(sorted(PATHS)),
  scale=st.sampled_from([None, 2.5]),
)
def test_argnums_in_any_order_and_keywords_pass_through(argnums, path, scale):
  """grad/value_and_grad/jacfwd/jacrev give one result per argnum, in the order asked
  (repeats allowed), each the single-argument result; keyword arguments reach the function
  undifferentiated."""
  kwargs = {} if scale is None else {"scale": scale}
  s = 1.0 if scale is None else scale
  single = [
    primc.grad(
      lambda a, b, c, i=i: _f(*[a, b, c][:i], [a, b, c][i], *[a, b, c][i + 1 :], scale=s), argnums=i
    )(*ARGS)
    for i in range(3)
  ]
  nums = tuple(argnums)
  wrap = PATHS[path]
  for transform in (primc.grad, primc.jacfwd, primc.jacrev):
    got = wrap(lambda *a: transform(_f, argnums=nums)(*a, **kwargs))(*ARGS)
    assert len(got) == len(nums)
    for g, i in zip(got, nums, strict=True):
      np.testing.assert_allclose(g, single[i], rtol=1e-12, atol=1e-14)
  value, got = primc.value_and_grad(_f, argnums=nums)(*ARGS, **kwargs)
  np.testing.assert_allclose(value, _f(*ARGS, scale=s), rtol=1e-14)
  for g, i in zip(got, nums, strict=True):
    np.testing.assert_allclose(g, single[i], rtol=1e-12, atol=1e-14)


def test_hessian_blocks_follow_argnums_order():
  f = lambda a, b: pnp.sum(pnp.sin(a) * b * b)
  a, b = R.standard_normal(2), R.standard_normal(2)
  h = primc.hessian(f, argnums=(1, 0))(a, b)
  h_ab = primc.hessian(f, argnums=(0, 1))(a, b)
  for i, j in itertools.product(range(2), repeat=2):
    np.testing.assert_allclose(h[i][j], h_ab[1 - i][1 - j], rtol=1e-13)
  np.testing.assert_allclose(h[0][0], np.diag(2 * np.sin(a)), rtol=1e-13)


@pytest.mark.parametrize("lead", [0, 1, 2, 3])
def test_tensor_jacobian_product_contracts_leading_output_axes(lead):
  """autograd's tensor_jacobian_product(f)(x, v) = tensordot(v, J, v.ndim): v may cover the
  output's leading axes only."""
  f = lambda a: pnp.roll(pnp.sin(a), 1) * 2.0
  x = R.standard_normal((5, 4, 3))
  v = R.standard_normal((5, 4, 3)[:lead])
  j = primc.jacobian(f)(x)
  want = np.tensordot(v, j, axes=lead)
  for path in PATHS.values():
    np.testing.assert_allclose(
      path(primc.tensor_jacobian_product(f))(x, v), want, rtol=1e-12, atol=1e-14
    )


def test_grad_of_a_non_float_output_is_a_type_error():
  with pytest.raises(TypeError, match="one-element float output"):
    primc.grad(lambda x: pnp.allclose(x, x * 3.0 / 3.0))(np.ones(3))
  # a branch on a value: this call's path, under jit a graph break (see
  # test_python_control_flow); with fullgraph=True, a TypeError naming it
  f = lambda x: pnp.sum(x) if x[0] else 0.0
  for transform in (primc.grad, lambda f: primc.jit(primc.grad(f))):
    np.testing.assert_array_equal(transform(f)(np.ones(3)), np.ones(3))
    np.testing.assert_array_equal(transform(f)(np.zeros(3)), np.zeros(3))
  with pytest.raises(TypeError, match="truth value"):
    primc.jit(primc.grad(f), fullgraph=True)(np.ones(3))


@pytest.mark.parametrize("path", ["eager", "jit_outside"])
def test_arguments_not_differentiated_may_be_python_values(path):
  """Types, functions, None and Python numbers in positions grad does not differentiate
  reach the function as they are (autograd's behaviour: `if flag:` works), eager; under an
  outer jit they are its static or traced arguments as usual."""

  def f(x, activation, flag, scale, kind):
    assert kind is list or kind is None
    y = activation(x) if flag else x
    return pnp.sum(y) * scale

  x = R.standard_normal(3)
  want = (1 - np.tanh(x) ** 2) * 2.5
  g = primc.grad(f)
  if path == "eager":
    np.testing.assert_allclose(g(x, pnp.tanh, True, 2.5, list), want, rtol=1e-13)
    np.testing.assert_allclose(g(x, pnp.tanh, False, 2.5, None), np.full(3, 2.5), rtol=1e-13)
  else:
    jg = primc.jit(g, static_argnums=(1, 2, 4))
    np.testing.assert_allclose(jg(x, pnp.tanh, True, 2.5, list), want, rtol=1e-13)
  with pytest.raises(primc.PrimcError, match="expected an array argument"):
    primc.grad(f, argnums=4)(x, pnp.tanh, True, 2.5, "text")
