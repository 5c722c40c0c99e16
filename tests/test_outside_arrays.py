"""Arrays that come from outside a traced function: closed-over constants, masked arrays,
`out=` arrays that alias the inputs, numpy's own functions on traced values."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

R = np.random.default_rng(3)
f32 = lambda *s: R.standard_normal(s).astype(np.float32)

# closed-over constants of every size, in every broadcasting position
CONST_SHAPES = [(), (1,), (16,), (3, 1), (1, 16), (16, 16), (4, 16, 16), (2, 1, 16)]
ARG_SHAPES = [(16,), (16, 16), (3, 16, 16)]


@pytest.mark.parametrize("cshape", CONST_SHAPES, ids=str)
def test_closed_over_constants_broadcast_under_jit(cshape):
  c = f32(*cshape)
  for ashape in ARG_SHAPES:
    try:
      want_shape = np.broadcast_shapes(cshape, ashape)
    except ValueError:
      continue
    a = f32(*ashape)
    fn = lambda x: (x + c, x * c - c, pnp.maximum(x, c), pnp.where(c > 0, x, c))
    got = primc.jit(fn)(a)
    want = (a + c, a * c - c, np.maximum(a, c), np.where(c > 0, a, c))
    for g, w in zip(got, want):
      assert g.shape == want_shape
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    grad = primc.jit(primc.grad(lambda x: pnp.sum(pnp.tanh(x) * c)))(a)
    np.testing.assert_allclose(
      grad,
      np.broadcast_to((1 - np.tanh(a) ** 2) * c, want_shape).reshape((-1,) + ashape).sum(0),
      rtol=2e-5,
      atol=2e-6,
    )


def test_closed_over_constants_in_products_and_gathers():
  w, idx = f32(16, 8), np.array([3, -1, 0])
  x = f32(4, 16)
  np.testing.assert_allclose(primc.jit(lambda a: (a @ w)[:, idx])(x), (x @ w)[:, idx], rtol=1e-5)
  np.testing.assert_allclose(primc.jit(lambda a: pnp.dot(a, np.float32(2.0)))(x), 2 * x)


def test_masked_arrays_are_refused_in_every_path():
  m = np.ma.MaskedArray([1.0, 2.0, 3.0], mask=[0, 1, 0])
  for call in (
    lambda: primc.jit(pnp.sum)(m),
    lambda: pnp.sum(m),
    lambda: primc.grad(pnp.sum)(m),
    lambda: primc.to_tensor(m),
    lambda: primc.to_tensor(m, dtype="float32"),
    lambda: primc.Tensor(m),
  ):
    with pytest.raises(primc.PrimcError, match="masked array"):
      call()


# out= that aliases an input: numpy's result, whatever the overlap
PROGRAMS = {
  "elementwise": (lambda a, b: a * 2.0 + b, lambda a, b: a * 2 + b),
  "transpose": (lambda a, b: a.T + b, lambda a, b: a.T + b),
  "matmul": (lambda a, b: a @ b + 1.0, lambda a, b: a @ b + 1),
  "reversed": (lambda a, b: a[::-1] - b[:, ::-1], lambda a, b: a[::-1] - b[:, ::-1]),
  "reduce": (lambda a, b: a - pnp.sum(b, axis=0), lambda a, b: a - b.sum(0)),
}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  st.sampled_from(sorted(PROGRAMS)), st.sampled_from(["a", "b", "aT", "bT", "fresh", "strided"])
)
def test_out_aliasing_an_input_gives_numpy_results(name, where):
  fn, ref = PROGRAMS[name]
  a, b = f32(5, 5), f32(5, 5)
  want = ref(a, b)
  a2, b2 = a.copy(), b.copy()
  big = np.zeros((5, 10), np.float32)
  out = {
    "a": a2,
    "b": b2,
    "aT": a2.T,
    "bT": b2.T,
    "fresh": np.empty((5, 5), np.float32),
    "strided": big[:, ::2],
  }[where]
  result = primc.jit(fn)(a2, b2, out=out)
  assert result is out
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_two_outputs_the_first_aliasing_an_input():
  f = primc.jit(lambda a: (a + 1.0, a * 2.0))
  a = f32(4, 4)
  a2, o2 = a.copy(), np.empty((4, 4), np.float32)
  f(a2, out=(a2, o2))
  np.testing.assert_allclose(a2, a + 1)
  np.testing.assert_allclose(o2, a * 2)  # read a before the first output was written
  with pytest.raises(primc.PrimcError, match="overlap each other"):
    f(a, out=(o2, o2))


def test_bad_out_arguments_are_primc_errors():
  f = primc.jit(lambda a: a * 2.0)
  a = f32(3)
  for out in (
    3,
    "x",
    [1.0, 2.0, 3.0],
    np.zeros(4, np.float32),
    np.zeros(3, np.float64),
    np.ma.zeros(3, np.float32),
  ):
    with pytest.raises(primc.PrimcError):
      f(a, out=out)
  readonly = np.zeros(3, np.float32)
  readonly.setflags(write=False)
  with pytest.raises(primc.PrimcError, match="writeable"):
    f(a, out=readonly)


def test_numpy_functions_on_traced_values_dispatch_or_explain():
  x = f32(4, 3)
  got = primc.jit(
    lambda a: (
      np.sum(a),
      np.tanh(a) * np.exp(a),
      np.mean(a, axis=0),
      np.maximum(a, 0.0),
      np.transpose(a),
    )
  )(x)
  want = (x.sum(), np.tanh(x) * np.exp(x), x.mean(0), np.maximum(x, 0), x.T)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
  np.testing.assert_allclose(primc.grad(lambda a: np.sum(np.sin(a)))(x), np.cos(x), rtol=1e-6)
  np.testing.assert_allclose(primc.jit(lambda a: np.sort(a, axis=0))(x), np.sort(x, axis=0))
  for fn, message in (
    (np.fft.fft, "primc.numpy has no fft"),
    (np.lexsort, "has no lexsort"),
    (np.unique, "unique of a traced array without size="),
  ):
    with pytest.raises(primc.PrimcError, match=message):
      primc.jit(lambda a: fn(a))(x)
  with pytest.raises(primc.PrimcError, match="primc.numpy"):
    primc.jit(lambda a: np.add(a, a, out=np.empty((4, 3), np.float32)))(x)
  # eager tensors: recorded when primc.numpy has the op, refused where a gradient is lost
  t = primc.to_tensor(x, stop_gradient=False)
  np.sin(t).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), np.cos(x), rtol=1e-6)
  with pytest.raises(primc.PrimcError, match="lose"):
    np.lexsort(t)
  np.testing.assert_array_equal(np.lexsort(primc.to_tensor(x)), np.lexsort(x))


def test_dot_follows_numpy_for_every_rank_pair():
  shapes = [
    ((), (3,)),
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((2, 5, 3), (3,)),
    ((2, 5, 3), (4, 3, 2)),
    ((3,), (2, 3, 4)),
  ]
  for sa, sb in shapes:
    a, b = f32(*sa), f32(*sb)
    np.testing.assert_allclose(pnp.dot(a, b), np.dot(a, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(primc.jit(pnp.dot)(a, b), np.dot(a, b), rtol=1e-5, atol=1e-5)
