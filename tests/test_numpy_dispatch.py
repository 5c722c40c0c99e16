"""primc.numpy on plain values: numpy's own function runs (no primitive bound, nothing
traced or compiled), with primc's results; primc's path runs where the two differ."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import core

R = np.random.default_rng(0)
X, Y = R.standard_normal(128), R.standard_normal(128)
M = R.standard_normal((16, 16)).astype(np.float32)
INTS = R.integers(-5, 5, 128).astype(np.int32)
CALLS = [
  ("add", (X, 1.0), {}),
  ("subtract", (X, Y), {}),
  ("multiply", (M, 2), {}),
  ("divide", (INTS, 3), {}),
  ("exp", (X,), {}),
  ("log", (np.abs(X) + 1,), {}),
  ("tanh", (M,), {}),
  ("sin", (X,), {}),
  ("sqrt", (np.abs(X),), {}),
  ("maximum", (X, 0.0), {}),
  ("where", (X > 0, X, Y), {}),
  ("sum", (M,), {"axis": 0}),
  ("mean", (INTS,), {}),
  ("max", (M,), {"axis": 1, "keepdims": True}),
  ("argmax", (X,), {}),
  ("dot", (M, M), {}),
  ("matmul", (M, M), {}),
  ("reshape", (X, (8, 16)), {}),
  ("transpose", (M,), {}),
  ("concatenate", ([X, Y],), {}),
  ("stack", ([X, Y],), {"axis": 1}),
  ("clip", (X, -1.0, 1.0), {}),
  ("cumsum", (INTS,), {}),
  ("sort", (X,), {}),
  ("logical_and", (X > 0, Y > 0), {}),
  ("floor_divide", (INTS, 2), {}),
]


@pytest.fixture
def nothing_bound(monkeypatch):
  """Fails a test in which any primitive is bound (traced or run eagerly)."""

  def refuse(prim, args, params):
    raise AssertionError(f"{prim.name} was bound")

  monkeypatch.setattr(core, "binder", [refuse])


@pytest.mark.parametrize("name, args, kwargs", CALLS, ids=[c[0] for c in CALLS])
def test_plain_calls_run_numpy_and_bind_nothing(name, args, kwargs, nothing_bound):
  got = getattr(pnp, name)(*args, **kwargs)
  want = getattr(np, name)(*args, **kwargs)  # numpy's scalars as numpy's scalars
  assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)


def test_primcs_path_where_primc_differs_from_numpy():
  b = np.array([True, False])
  assert pnp.sqrt(b).dtype == np.float64  # floats of bools: float64 (numpy: float16)
  with pytest.raises(primc.PrimcError, match="unsupported dtype"):
    pnp.sin(np.zeros(3, np.complex64))
  with pytest.raises(TypeError, match="shifts take integer"):  # as numpy refuses
    pnp.left_shift(np.ones(2), np.ones(2))
  np.testing.assert_array_equal(pnp.transpose(M, perm=(1, 0)), M.T)  # a Paddle keyword
  with pytest.raises(primc.PrimcError) as e:  # numpy's refusal, primc's words
    pnp.add(np.ones(3), np.ones(4))
  assert "add" in str(e.value) and "f64[3]" in str(e.value)


def test_traced_and_tape_values_still_take_primcs_path():
  g = primc.grad(lambda x: pnp.sum(pnp.tanh(x) * X))(Y)
  np.testing.assert_allclose(g, (1 - np.tanh(Y) ** 2) * X, rtol=1e-12)
  t = primc.to_tensor(Y.copy(), stop_gradient=False)
  pnp.sum(pnp.stack([t, t]) * 2.0).backward()  # a tape value inside a list
  np.testing.assert_allclose(t.grad.numpy(), np.full(128, 4.0))


CREATION = [  # primc's semantics (float32 by default), numpy's speed on values
  ("zeros", (3,), {}),
  ("zeros", ((2, 0),), {"dtype": "int32"}),
  ("ones", ((2, 2), "float64"), {}),
  ("full", ((2, 3), 0.5), {}),
  ("full", ((2,), np.float64(0.25)), {}),
  ("full", ((2, 2), 7), {"dtype": "int64"}),
  ("full", ((3,), True), {"dtype": "bool"}),
  ("empty", ((2, 2),), {}),
  ("eye", (3,), {}),
  ("eye", (3, 4, 1, "float64"), {}),
  ("eye", (4, 2, -1), {}),
  ("identity", (2,), {}),
  ("arange", (5,), {}),
  ("arange", (0.0, 1.0, 0.125), {}),
  ("arange", (2, 10, 3, "float32"), {}),
  ("arange", (1.5, -2.0, -0.5), {}),
  ("array", ([1.0, 2.0],), {}),
  ("array", ([[1, 2], [3, 4]],), {}),
  ("array", ([np.float32(1), 2.5],), {"dtype": "float32"}),
  ("zeros_like", (M,), {}),
  ("full_like", (INTS, 2), {}),
]


@pytest.mark.parametrize("name, args, kwargs", CREATION, ids=[c[0] for c in CREATION])
def test_creation_on_values_binds_nothing_and_is_what_tracing_gives(name, args, kwargs):
  """Creation functions on plain values run numpy at once (none of them binds a
  primitive: `zeros` cost ~9 us, `eye` ~42 us, through a primitive evaluated) and give
  what the same call traced and interpreted gives: dtype, shape and values."""
  fn = getattr(pnp, name)
  with pytest.MonkeyPatch.context() as m:
    m.setattr(core, "binder", [lambda prim, a, p: pytest.fail(f"{prim.name} was bound")])
    got = fn(*args, **kwargs)
  anchor = np.zeros(())
  program = primc.make_program(lambda z: (fn(*args, **kwargs), z))(anchor)
  want = primc.interpret(program, anchor)[0]
  assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)
  assert got.flags.writeable


OTHER_RESULTS = [  # numpy's results that are not one array: its own, given once
  ("split", (X, 4), {}),
  ("array_split", (X, 3), {}),
  ("meshgrid", (X[:3], Y[:4]), {}),
  ("divmod", (X, 0.7), {}),
  ("modf", (X,), {}),
  ("round", (X, 2), {}),
  ("around", (M,), {}),
  ("allclose", (X, X + 1e-12), {}),
  ("array_equal", (INTS, INTS), {}),
  ("size", (M,), {}),
  ("nonzero", (INTS,), {}),
  ("broadcast_arrays", (X[:, None], Y[None, :3]), {}),
  ("histogram", (X,), {"bins": 5}),
  ("unstack", (M,), {}),
]


def _same(got, want):
  assert type(got) is type(want), (type(got), type(want))
  if isinstance(want, (tuple, list)):
    assert len(got) == len(want)
    for g, w in zip(got, want):
      _same(g, w)
  elif isinstance(want, (np.ndarray, np.generic)):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
  else:
    assert got == want


@pytest.mark.parametrize("name, args, kwargs", OTHER_RESULTS, ids=[c[0] for c in OTHER_RESULTS])
def test_numpys_other_results_are_numpys_and_bind_nothing(name, args, kwargs, monkeypatch):
  """Tuples and lists of arrays, Python bools and ints from numpy's function on plain
  values are returned as numpy gives them, no primitive bound (these once fell to
  primc's path after numpy's had run: `allclose` 43 us against numpy's 13; `round_` and
  `divmod_` never found their twins)."""
  monkeypatch.setattr(core, "binder", [lambda prim, a, p: pytest.fail(f"{prim.name} bound")])
  got = getattr(pnp, name)(*args, **kwargs)
  monkeypatch.undo()
  _same(got, getattr(np, name)(*args, **kwargs))


_INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"]


@settings(max_examples=80, deadline=None)
@given(
  dtype=st.sampled_from(_INT_DTYPES),
  offsets=st.lists(st.integers(-2, 2), min_size=1, max_size=3),
  at_max=st.booleans(),
  call=st.sampled_from(["array", "asarray"]),
  nested=st.booleans(),
)
def test_python_ints_out_of_a_dtypes_range_raise_as_numpys(dtype, offsets, at_max, call, nested):
  """Python integers given an integer dtype: converted as numpy converts them, on values
  and traced; one out of the dtype's range raises OverflowError as numpy's does, never
  wraps (a cast did: `array([2**40], "int32")` gave 0)."""
  info = np.iinfo(dtype)
  values = [int(info.max if at_max else info.min) + k for k in offsets]
  obj = [values] if nested else values
  fn = lambda: getattr(pnp, call)(obj, dtype)
  try:
    want = np.asarray(obj, dtype)
  except OverflowError:
    with pytest.raises(OverflowError):
      fn()
    with pytest.raises(OverflowError):
      primc.make_program(lambda z: (fn(), z))(np.zeros(()))
    return
  for got in (
    fn(),
    primc.interpret(primc.make_program(lambda z: (fn(), z))(np.zeros(())), np.zeros(()))[0],
  ):
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_array_equal(got, want)


_AXIS_CALLS = {
  "concatenate": lambda np_, a, k: np_.concatenate([a, a], axis=k),
  "stack": lambda np_, a, k: np_.stack([a, a], axis=k),
  "expand_dims": lambda np_, a, k: np_.expand_dims(a, k),
  "transpose": lambda np_, a, k: np_.transpose(a, (k, 1 - k % 2, 2) if a.ndim == 3 else (k, 0)),
  "moveaxis": lambda np_, a, k: np_.moveaxis(a, k, 0),
  "rot90": lambda np_, a, k: np_.rot90(a, 1, (k, 0)),
  "apply_along_axis": lambda np_, a, k: np_.apply_along_axis(np_.sum, k, a),
}


@settings(max_examples=120, deadline=None)
@given(
  name=st.sampled_from(sorted(_AXIS_CALLS)),
  axis=st.integers(-5, 5),
  rank=st.sampled_from([2, 3]),
)
def test_an_axis_out_of_range_is_an_error_as_numpys(name, axis, rank):
  """An axis is an error where numpy's is out of range, on values and traced, never
  wrapped around (`concatenate(.., axis=5)` once joined along axis 5 % rank)."""
  a = np.arange(24.0)[: 2 * 3 * (4 if rank == 3 else 1)].reshape((2, 3, 4)[:rank])
  call = _AXIS_CALLS[name]
  try:
    want = call(np, a, axis)
  except (ValueError, IndexError):  # (numpy's AxisError is both)
    with pytest.raises(primc.PrimcError):
      call(pnp, a, axis)
    with pytest.raises(primc.PrimcError):
      primc.make_program(lambda x: call(pnp, x, axis))(a)
    return
  np.testing.assert_array_equal(call(pnp, a, axis), want)
  program = primc.make_program(lambda x: call(pnp, x, axis))(a)
  np.testing.assert_array_equal(primc.interpret(program, a)[0], want)


_SPD = (M @ M.T + 16 * np.eye(16, dtype=np.float32)).astype(np.float64)  # (positive definite)
LINALG_CALLS = [
  ("solve", (_SPD, X[:16]), {}),
  ("solve", (_SPD, M.astype(np.float64)), {}),
  ("inv", (_SPD,), {}),
  ("det", (M,), {}),
  ("slogdet", (_SPD,), {}),
  ("cholesky", (_SPD,), {}),
  ("eigvalsh", (_SPD,), {}),
  ("norm", (M,), {}),
  ("norm", (X,), {"ord": 1}),
  ("norm", (M,), {"axis": 1}),
  ("svdvals", (M,), {}),
  ("cond", (_SPD,), {}),
  ("tensorinv", (_SPD,), {"ind": 1}),
  ("pinv", (_SPD,), {}),
  ("matrix_rank", (_SPD,), {}),
  ("matrix_power", (_SPD,), {"n": 3}),
  ("multi_dot", ([_SPD, _SPD, _SPD],), {}),
  ("tensorsolve", (_SPD, X[:16]), {}),
  ("trace", (M,), {}),
  ("diagonal", (M,), {}),
]


@pytest.mark.parametrize(
  "name, args, kwargs", LINALG_CALLS, ids=[f"{c[0]}-{k}" for k, c in enumerate(LINALG_CALLS)]
)
def test_linalg_on_values_is_numpys_and_binds_nothing(name, args, kwargs, monkeypatch):
  """primc.numpy.linalg's functions on plain values run numpy.linalg's (each once bound
  primitive by primitive: `solve` 2x numpy's time, `cholesky` 14x, `norm` 29x), their
  results as numpy gives them; traced, primc's path gives what numpy gives. (eigh, qr,
  svd and lstsq keep primc's path: its vectors' signs, lstsq's residuals, test_linalg.py.)"""
  monkeypatch.setattr(core, "binder", [lambda prim, a, p: pytest.fail(f"{prim.name} bound")])
  got = getattr(pnp.linalg, name)(*args, **kwargs)
  monkeypatch.undo()
  want = getattr(np.linalg, name)(*args, **kwargs)
  _same(got, want)
  traced = primc.jit(lambda *a: getattr(pnp.linalg, name)(*a, **kwargs))(*args)
  parts = lambda out: list(out) if isinstance(out, tuple) else [out]  # noqa: E731
  for g, w in zip(parts(traced), parts(want), strict=True):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
