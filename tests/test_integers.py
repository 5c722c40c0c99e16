"""Integer arithmetic as numpy does it, in every path: int32 results wrap at 32 bits at
every step (a compiled kernel computes in int64 and must truncate each value, or an
overflowed intermediate changes what follows: a floor division, a comparison, a
maximum), and sums, products and their scans of bools and int32 accumulate in int64."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

# (name, primc op, numpy op): unary on x, or binary on (x, y)
UNARY = [
  ("neg", lambda x: -x, lambda x: -x),
  ("abs", pnp.abs, np.abs),
  ("square", pnp.square, np.square),
  ("sign", pnp.sign, np.sign),
  ("invert", lambda x: ~x, lambda x: ~x),
  ("floordiv7", lambda x: x // 7, lambda x: x // 7),
  ("mod1000", lambda x: x % 1000, lambda x: x % 1000),
  ("shr3", lambda x: x >> 3, lambda x: x >> 3),
  ("shl5", lambda x: x << 5, lambda x: x << 5),
  ("clip", lambda x: pnp.clip(x, -5, 1 << 20), lambda x: np.clip(x, -5, 1 << 20)),
  ("cumsum", lambda x: pnp.cumsum(x, axis=-1), lambda x: np.cumsum(x, axis=-1)),
  ("take", lambda x: pnp.take(x, [2, 0, 2], axis=-1), lambda x: np.take(x, [2, 0, 2], axis=-1)),
  ("flip", lambda x: pnp.flip(x, 0), lambda x: np.flip(x, 0)),
]
BINARY = [
  ("add", pnp.add, np.add),
  ("sub", pnp.subtract, np.subtract),
  ("mul", pnp.multiply, np.multiply),
  ("floordiv", pnp.floor_divide, np.floor_divide),
  ("mod", pnp.mod, np.mod),
  ("max", pnp.maximum, np.maximum),
  ("min", pnp.minimum, np.minimum),
  ("and", pnp.bitwise_and, np.bitwise_and),
  ("xor", pnp.bitwise_xor, np.bitwise_xor),
  ("where_gt", lambda x, y: pnp.where(x > y, x - y, y), lambda x, y: np.where(x > y, x - y, y)),
  ("shl", lambda x, y: x << (y & 63), lambda x, y: x << (y & 63)),
]
# the last step: an array as it is, or a reduction (numpy's int64 accumulation), or a float
FINAL = [
  ("same", lambda x: x, lambda x: x),
  ("sum", lambda x: pnp.sum(x, axis=-1), lambda x: np.sum(x, axis=-1)),
  ("sum_all", pnp.sum, np.sum),
  ("prod", lambda x: pnp.prod(x, axis=0), lambda x: np.prod(x, axis=0)),
  ("to_float", lambda x: x.astype(np.float64) * 0.5, lambda x: x.astype(np.float64) * 0.5),
  ("greater", lambda x: x > 0, lambda x: x > 0),
  ("method_sum", lambda x: x.sum(axis=0), lambda x: x.sum(axis=0)),
  ("gram", lambda x: x @ x.T, lambda x: x @ x.T),
  ("gram_then", lambda x: (x @ x.T) // 3 - x[:, :2], lambda x: (x @ x.T) // 3 - x[:, :2]),
]


def _edges(dtype):
  info = np.iinfo(dtype)
  return [
    0,
    1,
    -1,
    2,
    7,
    100_000,
    -70_000,
    1 << 20,
    info.max,
    info.min,
    info.max - 1,
    info.min + 1,
    info.max // 2 + 3,
  ]


@st.composite
def programs(draw):
  dtype = draw(st.sampled_from([np.int32, np.int64]))
  steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 100)), min_size=1, max_size=5))
  final = FINAL[draw(st.integers(0, len(FINAL) - 1))]
  values = st.one_of(
    st.sampled_from(_edges(dtype)), st.integers(np.iinfo(dtype).min, np.iinfo(dtype).max)
  )
  x = np.array(draw(st.lists(values, min_size=6, max_size=6)), dtype).reshape(2, 3)
  y = np.array(draw(st.lists(values, min_size=6, max_size=6)), dtype).reshape(2, 3)

  def make(ops):
    def f(x, y):
      for binary, k in steps:
        x = ops(binary, k)(x, y) if binary else ops(binary, k)(x)
      return final[1 if ops is primc_op else 2](x)

    return f

  def primc_op(binary, k):
    table = BINARY if binary else UNARY
    return table[k % len(table)][1]

  def numpy_op(binary, k):
    table = BINARY if binary else UNARY
    return table[k % len(table)][2]

  names = [(BINARY if b else UNARY)[k % len(BINARY if b else UNARY)][0] for b, k in steps]
  return make(primc_op), make(numpy_op), x, y, names + [final[0]]


def _same(got, want, what):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
  np.testing.assert_array_equal(got, want, err_msg=str(what))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_integer_programs_equal_numpy_in_every_path(case):
  f, ref, x, y, names = case
  with np.errstate(all="ignore"):
    want = ref(x, y)
    _same(f(x, y), want, ["eager"] + names)
    _same(primc.interpret(primc.make_program(f)(x, y), x, y)[0], want, ["interpreted"] + names)
    _same(primc.jit(f)(x, y), want, ["jit"] + names)
    batched = primc.jit(primc.vmap(f))(np.stack([x, y]), np.stack([y, x]))
    _same(batched[0], want, ["jit(vmap)"] + names)
    _same(batched[1], ref(y, x), ["jit(vmap)"] + names)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.int64, np.float32])
@pytest.mark.parametrize(
  "name",
  [
    "sum",
    "prod",
    "cumsum",
    "cumprod",
    "trace",
    "nansum",
    "nanprod",
    "nancumsum",
    "nancumprod",
    "cumulative_sum",
  ],
)
def test_sums_and_products_accumulate_as_numpy_does(name, dtype):
  # numpy sums bools and integers narrower than its default integer in int64: a sum of
  # int32 values past 2^31 is right, and its dtype is int64, in every path
  x = (
    np.array([[1, 0, 1], [1, 1, 0]], dtype)
    if dtype is np.bool_
    else np.array([[2**30, 3, 2**30], [2**30, -5, 7]], dtype)
  )
  if name == "cumulative_sum" and not hasattr(np, "cumulative_sum"):
    pytest.skip("numpy < 2.1 has no cumulative_sum")
  ours, theirs = getattr(pnp, name), getattr(np, name)
  want = theirs(x) if name in ("trace",) else theirs(x, axis=-1 if "cum" in name else None)
  f = (
    (lambda x: ours(x))
    if name == "trace"
    else (lambda x: ours(x, axis=-1 if "cum" in name else None))
  )
  for path, got in [
    ("eager", f(x)),
    ("jit", primc.jit(f)(x)),
    ("interpreted", primc.interpret(primc.make_program(f)(x), x)[0]),
  ]:
    np.testing.assert_allclose(
      np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-6, err_msg=path
    )
    assert np.asarray(got).dtype == np.asarray(want).dtype, (path, got.dtype, want.dtype)
