"""Indexing follows numpy exactly, values and gradients, in every path.

Random index expressions (integers in and out of bounds, slices with any step, None,
Ellipsis, integer arrays, boolean masks) are checked against numpy: eagerly on arrays,
traced and interpreted, compiled, differentiated (against `np.add.at`), on eager tensors,
in static programs and under vmap. Indices known only at run time are checked by the
compiled code."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import core, static
from primc.trace import trace_flat

SHAPE = (4, 3, 5)


@st.composite
def index_exprs(draw, shape=SHAPE):
  """A numpy index for an array of `shape`: mostly valid, sometimes out of bounds."""
  entries, dim, ellipsis = [], 0, False
  for _ in range(draw(st.integers(0, len(shape) + 2))):
    kind = draw(st.sampled_from(["int", "slice", "slice", "none", "ellipsis", "array", "mask"]))
    if kind == "none":
      entries.append(None)
      continue
    if kind == "ellipsis":
      if not ellipsis:
        entries.append(Ellipsis)
        ellipsis = True
      continue
    n = shape[dim] if dim < len(shape) else 2
    if kind == "int":
      entries.append(draw(st.integers(-n - 1, n)))
    elif kind == "slice":
      bound = st.none() | st.integers(-n - 2, n + 2)
      entries.append(
        slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3])))
      )
    elif kind == "array":
      ishape = draw(st.sampled_from([(0,), (1,), (3,), (2, 2)]))
      values = draw(
        st.lists(
          st.integers(-n - 1, n), min_size=int(np.prod(ishape)), max_size=int(np.prod(ishape))
        )
      )
      dtype = draw(st.sampled_from([np.int32, np.int64]))
      entries.append(np.array(values, dtype).reshape(ishape))
    else:
      entries.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
    dim += 1
  if len(entries) == 1 and draw(st.booleans()):
    return entries[0]
  return tuple(entries)


def numpy_result(x, idx):
  """numpy's value, or IndexError."""
  try:
    return x[idx]
  except IndexError:
    return IndexError


X = np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE) * 0.5 - 7.0


def check(got_fn, want):
  if want is IndexError:
    with pytest.raises(IndexError):
      got_fn()
  else:
    got = np.asarray(got_fn())
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs())
def test_random_indices_eager_and_interpreted_equal_numpy(idx):
  want = numpy_result(X, idx)
  check(lambda: pnp.getitem(X, idx), want)
  check(lambda: primc.interpret(primc.make_program(lambda a: a[idx])(X), X)[0], want)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs(), st.integers(0, 2**31 - 1))
def test_random_index_gradients_equal_numpy_add_at(idx, seed):
  want = numpy_result(X, idx)
  if want is IndexError:
    with pytest.raises(IndexError):
      primc.grad(lambda a: pnp.sum(a[idx]))(X)
    return
  w = np.random.default_rng(seed).standard_normal(want.shape)
  oracle = np.zeros_like(X)
  np.add.at(oracle, idx, w)
  np.testing.assert_allclose(primc.grad(lambda a: pnp.sum(a[idx] * w))(X), oracle, atol=1e-12)
  # forward mode agrees with the transpose of reverse mode
  tangent = np.random.default_rng(seed + 1).standard_normal(X.shape)
  _, jv = primc.jvp(lambda a: a[idx], (X,), (tangent,))
  np.testing.assert_allclose(np.sum(jv * w), np.sum(oracle * tangent), rtol=1e-10, atol=1e-10)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs())
# an empty selection: its gradient once read an empty array in a kernel (test_empty_arrays)
@example((np.array([True, False, True, True]), slice(None, -5, None), -4, None, None))
def test_random_index_gradients_on_the_eager_tape(idx):
  """Paddle dygraph style: the backward of an indexing op is compiled (one per example)."""
  want = numpy_result(X, idx)
  t = primc.to_tensor(X, stop_gradient=False)
  if want is IndexError:
    with pytest.raises(IndexError):
      t[idx]
    return
  w = np.linspace(-1, 1, want.size).reshape(want.shape)
  oracle = np.zeros_like(X)
  np.add.at(oracle, idx, w)
  (t[idx] * w).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), oracle, atol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs())
def test_random_indices_batched_equal_a_loop(idx):
  xs = np.stack([X, X[::-1] * 2.0, X + 1.0])
  want = [numpy_result(x, idx) for x in xs]
  if want[0] is IndexError:
    with pytest.raises(IndexError):
      primc.vmap(lambda a: a[idx])(xs)
    return
  np.testing.assert_array_equal(primc.vmap(lambda a: a[idx])(xs), np.stack(want))


def _traced_arrays(idx):
  """(f(a, *arrays), the index's integer arrays): `idx` with its integer arrays made
  arguments of f, so that they are traced."""
  entries = idx if isinstance(idx, tuple) else (idx,)
  at = [k for k, e in enumerate(entries) if isinstance(e, np.ndarray) and e.dtype.kind == "i"]

  def f(a, *arrays):
    given = list(entries)
    for k, v in zip(at, arrays):
      given[k] = v
    return a[tuple(given) if isinstance(idx, tuple) else given[0]]

  return f, [entries[k] for k in at]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs(), st.integers(0, 2**31 - 1))
def test_random_traced_index_arrays_equal_numpy(idx, seed):
  # index arrays computed in the program (traced), alone or with ints, slices, None and
  # constant arrays: checked and wrapped at run time, each against its own axis
  f, arrays = _traced_arrays(idx)
  want = numpy_result(X, idx)
  check(lambda: primc.interpret(primc.make_program(f)(X, *arrays), X, *arrays)[0], want)
  if want is IndexError:
    return
  w = np.random.default_rng(seed).standard_normal(want.shape)
  oracle = np.zeros_like(X)
  np.add.at(oracle, idx, w)
  grad = primc.grad(lambda a, *ks: pnp.sum(f(a, *ks) * w))
  np.testing.assert_allclose(grad(X, *arrays), oracle, atol=1e-12)


def test_several_traced_index_arrays_gather_only_what_they_select():
  # m[i, j] with i, j computed: one gather of B's elements at the merged dims' flat
  # positions (gathering one dim after another made B x m's other dims first: a 110x110
  # advection's 12,100 positions became 1.3 million elements)
  m, i, j = np.ones((50, 60)), np.array([1, -2, 3]), np.array([[4], [-5]])
  program = primc.make_program(lambda m, i, j: m[i, j])(m, i, j)
  gathered = [e.outputs[0].aval.shape for e in program.eqns if e.prim.name == "gather"]
  assert gathered and all(np.prod(shape) <= 6 for shape in gathered), gathered
  with pytest.raises(IndexError, match="index 60 is out of bounds for axis 1 with size 60"):
    primc.interpret(program, m, i, np.array([[60], [0]]))


# Compiled: fewer examples (each is a compile), plus fixed cases covering every kind.
FIXED = [
  np.s_[[-1, 0, 2]],
  np.s_[::-1],
  np.s_[3:0:-2],
  np.s_[:, ::-2],
  np.s_[..., 1, None],
  np.s_[[True, False, True, True], 1:],
  np.s_[:, [[0], [2]], [1, -1]],
  np.s_[[1, 2], :, [0, 4]],
  np.s_[None, 2, :, [-5, 4]],
  np.s_[1:1],
  np.s_[[]],
  np.s_[-4, -3, -5],
]


@pytest.mark.parametrize("idx", FIXED, ids=[str(i) for i in range(len(FIXED))])
def test_fixed_indices_compiled_values_and_gradients(idx):
  x = X.astype(np.float32)
  want = x[idx]
  np.testing.assert_array_equal(primc.jit(lambda a: a[idx])(x), want)
  oracle = np.zeros_like(x)
  np.add.at(oracle, idx, np.ones(want.shape, np.float32))
  np.testing.assert_array_equal(primc.jit(primc.grad(lambda a: pnp.sum(a[idx])))(x), oracle)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(index_exprs())
def test_random_indices_compiled_equal_numpy(idx):
  x = X.astype(np.float32)
  check(lambda: primc.jit(lambda a: a[idx])(x), numpy_result(x, idx))


def test_static_program_indexing():
  static.reset()
  static.enable_static()
  try:
    x = static.data("x", shape=SHAPE, dtype="float64")
    ys = [x[idx] for idx in FIXED[:6]]
  finally:
    static.disable_static()
  got = static.Executor().run(feed={"x": X}, fetch_list=ys)
  for g, idx in zip(got, FIXED[:6]):
    np.testing.assert_array_equal(g, X[idx])


def test_out_of_bounds_constant_indices_raise_naming_index_and_axis():
  x = np.arange(5, dtype=np.float32)
  for fn in (
    lambda: pnp.getitem(x, [7]),
    lambda: primc.jit(lambda a: a[[0, 7]])(x),
    lambda: primc.grad(lambda a: a[[7]].sum())(x),
    lambda: pnp.take(x, [-6]),
  ):
    with pytest.raises(IndexError, match=r"index (7|-6) is out of bounds for axis 0 with size 5"):
      fn()


def test_run_time_indices_are_checked_by_compiled_code():
  x = np.arange(5, dtype=np.float32)
  take = primc.jit(lambda a, i: pnp.take(a, i))
  np.testing.assert_array_equal(take(x, np.array([-1, 0, 4])), x[[-1, 0, 4]])
  for bad in ([5], [0, -6], [2, 9, 1]):
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 5"):
      take(x, np.array(bad))
  # the steady (native) call checks too, and the call after an error is right
  np.testing.assert_array_equal(take(x, np.array([-2, 1, 3])), x[[-2, 1, 3]])
  with pytest.raises(IndexError, match="index 5 is out of bounds"):
    take(x, np.array([1, 5, 0]))
  # gradients scatter with the same checks: no out-of-bounds write
  g = primc.jit(primc.grad(lambda a, i: pnp.sum(pnp.take(a, i) ** 2)))
  np.testing.assert_array_equal(g(x, np.array([-1, -1])), [0, 0, 0, 0, 16])
  with pytest.raises(IndexError):
    g(x, np.array([5]))
  # several traced index arrays, and batched (vmap) indices
  two = primc.jit(lambda a, i, j: a[i, j])
  m = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(two(m, np.array([0, -1]), np.array([3, -4])), m[[0, -1], [3, -4]])
  with pytest.raises(IndexError, match="axis 1 with size 4"):
    two(m, np.array([0, 1]), np.array([0, 4]))
  batched = primc.jit(primc.vmap(lambda a, i: pnp.take(a, i)))
  rows = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(batched(rows, np.array([[2], [-1]])), [[2], [5]])
  with pytest.raises(IndexError):
    batched(rows, np.array([[0], [3]]))


def test_taking_from_an_empty_axis_raises():
  empty = np.zeros(0, np.float32)
  f = primc.jit(lambda a, i: pnp.take(a, i))
  with pytest.raises(IndexError, match="size 0"):
    f(empty, np.array([0]))
  with pytest.raises(IndexError, match="size 0"):
    primc.jit(primc.grad(lambda a, i: pnp.sum(pnp.take(a, i))))(empty, np.array([0]))
  assert f(empty, np.zeros(0, np.int64)).shape == (0,)  # no index: nothing to check


def test_iterating_and_unpacking_traced_arrays():
  x = np.arange(6, dtype=np.float32).reshape(3, 2)
  rows = primc.jit(lambda a: sum(r * r for r in a))(x)
  np.testing.assert_array_equal(rows, sum(r * r for r in x))

  def unpack(a):
    p, q, r = a
    return p - r

  np.testing.assert_array_equal(primc.jit(unpack)(x), x[0] - x[2])
  np.testing.assert_array_equal(
    primc.grad(lambda a: pnp.sum(unpack(a)))(x), [[1, 1], [0, 0], [-1, -1]]
  )
  t = primc.to_tensor(x)
  np.testing.assert_array_equal([r.numpy() for r in t], list(x))


def test_lazy_jacobian_indexes_like_its_matrix():
  from primc import autograd

  x = np.arange(6, dtype=np.float64)
  f = lambda v: v * v * pnp.sum(v) + v[::-1]
  dense = primc.jacrev(f)(x)
  J = autograd.Jacobian(f, x)
  for idx in (
    np.s_[..., 0],
    np.s_[-1, :],
    np.s_[2, 3],
    np.s_[:, -2],
    np.s_[1:5:2, ::-1],
    np.s_[[0, -1]],
    np.s_[None, 3],
    np.s_[-6],
  ):
    np.testing.assert_allclose(J[idx], dense[idx], rtol=1e-12, err_msg=str(idx))
  for bad in (np.s_[6, :], np.s_[:, 6], np.s_[-7], np.s_[0, 0, 0]):
    with pytest.raises(IndexError):
      J[bad]
  per_row = lambda v: v * v * pnp.sum(v, axis=-1, keepdims=True) + v[..., ::-1]
  Jb = autograd.Jacobian(per_row, x.reshape(2, 3), is_batched=True)
  denses = np.stack([primc.jacrev(per_row)(r) for r in x.reshape(2, 3)])
  np.testing.assert_allclose(Jb[:, -1, :], denses[:, -1, :], rtol=1e-12)
  np.testing.assert_allclose(Jb[..., 1], denses[..., 1], rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
  st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.integers(-shape[0] - 1, shape[0]))
  )
)
def test_one_integer_stages_what_the_general_index_stages(case):
  """`x[i]` (one integer: a loop's step, staged directly) stages the equations of
  `x[(i,)]` (the general index), and raises where that raises."""
  shape, i = case
  aval = core.ShapedArray(shape, "float64")

  def staged(index):
    try:
      program, _, _ = trace_flat(lambda x: x[index], [aval])
    except Exception as e:  # noqa: BLE001 - the two raise alike (the index's form
      return type(e), str(e).split("): ")[1]  # aside: `int` and `[int]`)
    return [(e.prim.name, e.params, e.outputs[0].aval) for e in program.eqns]

  assert staged(i) == staged((i,))
