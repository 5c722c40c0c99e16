"""In-place updates while tracing (`y[idx] = v`, `y += v`) are functionalized: random
update sequences give numpy's values under jit, kept transforms and vmap, and derivatives
agree with finite differences; views see and pass on writes as numpy's do."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc.settings import config

INDICES = [
  0,
  -1,
  slice(1, 3),
  slice(None, None, 2),
  (np.array([0, 2]),),
  np.array([True, False, True, False, True]),
  Ellipsis,
]


def _apply(y, x, steps):
  """The update sequence on y (numpy array or traced), with values from x."""
  for kind, which, scale in steps:
    idx = INDICES[which]
    if kind == "set":
      y[idx] = x[which % 5] * scale
    elif kind == "set_scalar":
      y[idx] = scale
    elif kind == "iadd":
      y += x * scale
    elif kind == "imul":
      y *= scale
    else:
      y -= x[::-1] * scale
  return y


STEPS = st.lists(
  st.tuples(
    st.sampled_from(["set", "set_scalar", "iadd", "imul", "isub"]),
    st.integers(0, len(INDICES) - 1),
    st.floats(-2, 2, allow_nan=False, width=32),
  ),
  min_size=1,
  max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS)
def test_update_sequences_give_numpys_values_and_derivatives(steps):
  x = np.linspace(-1.0, 1.0, 5)

  def f(x):
    y = x * 1.0  # made in the function: its own to change
    z = y  # another name: sees every change, as in numpy
    _apply(y, x, steps)
    return z * z + x

  want = f(x.copy())  # numpy itself
  config.interpret = True  # the traced program, on the interpreter (compiled: below)
  try:
    np.testing.assert_allclose(primc.jit(f)(x), want, rtol=1e-12, atol=1e-12)
  finally:
    config.interpret = False
  np.testing.assert_allclose(
    primc.vmap(f)(np.stack([x, x])), np.stack([want, want]), rtol=1e-12, atol=1e-12
  )
  loss = lambda x: pnp.sum(f(x) * np.arange(1.0, 6.0))
  g = primc.grad(loss)(x)
  eps = 1e-6
  fd = [
    (np.sum(f(x + eps * e) * np.arange(1.0, 6.0)) - np.sum(f(x - eps * e) * np.arange(1.0, 6.0)))
    / (2 * eps)
    for e in np.eye(5)
  ]
  np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_an_update_sequence_compiled():
  x = np.linspace(-1.0, 1.0, 5)
  steps = [("set", 2, 1.5), ("iadd", 0, 0.5), ("set", 5, -1.0), ("imul", 1, 2.0)]

  def f(x):
    y = x * 1.0
    _apply(y, x, steps)
    return y

  np.testing.assert_allclose(primc.jit(f)(x), f(x.copy()), rtol=1e-12)


# Views, as numpy makes them: each takes one array of the list and gives a new one
VIEWS = [
  lambda a: a[1:3] if a.ndim and a.shape[0] > 2 else None,
  lambda a: a[:, ::2] if a.ndim > 1 else None,
  lambda a: a[0] if a.ndim > 1 and a.shape[0] else None,  # (of 1-d: a scalar)
  lambda a: a[..., -1] if a.ndim and a.shape[-1] else None,
  lambda a: a.T,
  lambda a: a.reshape(-1),  # a view of contiguous arrays, else numpy copies
  lambda a: a.swapaxes(0, -1) if a.ndim else None,
  lambda a: a[None],
  lambda a: a[[0, 0]] if a.ndim and a.shape[0] else None,
]  # a copy
WRITES = [
  lambda a, s: a.__setitem__(Ellipsis, s),
  lambda a, s: a.__setitem__(0, s) if a.ndim and a.shape[0] else None,
  lambda a, s: a.__iadd__(s),
  lambda a, s: a.__imul__(s * 0.5 + 1.0),
]


@pytest.mark.parametrize(
  "steps",
  [
    [("view", 0, 2), ("view", 1, 2), ("write", 2, 0)],
    [("view", 0, 3), ("view", 1, 3), ("write", 2, 2)],
    [("view", 0, 2), ("view", 1, 12), ("view", 2, 16), ("write", 0, 0)],
  ],
)
def test_views_of_views_down_to_0_d(steps):
  """(Seeds hypothesis found: a row's row is numpy's scalar where a[0] indexes a 1-d
  array, never written; a[..., -1] is a 0-d view, written through; a new axis of that
  0-d view, a[None], is a view too, and sees a write into the base.)"""
  x = np.random.default_rng(1).standard_normal((4, 6))
  np.testing.assert_allclose(
    primc.jit(_views_program(steps, pnp))(x), _views_program(steps, np)(x.copy()), rtol=1e-12
  )


def _views_program(steps, m):
  """A function of x through `steps`: new views of the arrays made so far, and writes
  into them (of values from x); returns every array, weighted, summed."""

  def f(x):
    arrays = [x * 1.0]
    for kind, which, k in steps:
      a = arrays[which % len(arrays)]
      if kind == "view":
        v = VIEWS[k % len(VIEWS)](a)
        if v is not None:
          arrays.append(v)
      else:
        WRITES[k % len(WRITES)](a, m.sum(x[k % 4]) * (k + 1) * 0.25)
    return sum(m.sum(a * (i + 1.0)) for i, a in enumerate(arrays))

  return f


VIEW_STEPS = st.lists(
  st.tuples(st.sampled_from(["view", "view", "write"]), st.integers(0, 7), st.integers(0, 17)),
  min_size=1,
  max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(VIEW_STEPS)
def test_views_see_and_pass_on_writes_as_numpys_do(steps):
  """Writes into views reach their base and the base's other views, and numpy's copies
  stay apart, in every path: values against numpy, gradients against finite
  differences."""
  x = np.random.default_rng(len(steps)).standard_normal((4, 6))
  want = _views_program(steps, np)(x.copy())
  f = _views_program(steps, pnp)
  config.interpret = True
  try:
    np.testing.assert_allclose(primc.jit(f)(x), want, rtol=1e-10, atol=1e-10)
  finally:
    config.interpret = False
  np.testing.assert_allclose(primc.vmap(f)(np.stack([x, x])), [want, want], rtol=1e-10, atol=1e-10)
  fn = _views_program(steps, np)
  eps = 1e-6
  fd = np.array(
    [
      (fn(x + eps * e.reshape(4, 6)) - fn(x - eps * e.reshape(4, 6))) / (2 * eps)
      for e in np.eye(24)
    ]
  ).reshape(4, 6)
  np.testing.assert_allclose(primc.grad(f)(x), fd, rtol=1e-5, atol=1e-5)


def test_a_read_only_view_is_refused_as_numpy_refuses_it():
  def f(x):
    v = pnp.broadcast_to(x * 1.0, (3, 2))
    v[0] = 1.0
    return v

  with pytest.raises(ValueError, match="read-only"):
    f(np.ones(2))  # numpy itself
  with pytest.raises(primc.PrimcError, match="read-only"):
    primc.jit(f)(np.ones(2))


def test_in_place_keeps_the_arrays_dtype_as_numpy_does():
  def f(x):
    y = pnp.zeros(3, dtype="float32")
    y += x  # float64 into float32: numpy casts (same kind)
    return y

  assert primc.jit(f)(np.ones(3)).dtype == np.float32

  def g(x):
    y = pnp.zeros(3, dtype="int32")
    y += x  # float into int: numpy refuses
    return y

  with pytest.raises(primc.PrimcError, match="same_kind"):
    primc.jit(g)(np.ones(3))


# one-array functions and methods whose result numpy makes a copy, a view, or the argument
# itself: a write into the result reaches the argument exactly where numpy's does (an op
# that computes nothing must still give a copy apart from its argument where numpy does)
SAME_OR_APART = {
  "copy": lambda m, x: m.copy(x),
  "copy_method": lambda m, x: x.copy(),
  "array": lambda m, x: m.array(x),
  "asarray": lambda m, x: m.asarray(x),
  "astype_same": lambda m, x: x.astype(x.dtype),
  "astype_f32": lambda m, x: x.astype("float32"),
  "pos": lambda m, x: +x,
  "neg": lambda m, x: -x,
  "times_one": lambda m, x: x * 1.0,
  "flatten": lambda m, x: x.flatten(),
  "ravel": lambda m, x: m.ravel(x),
  "reshape_same": lambda m, x: x.reshape(x.shape),
  "full_slice": lambda m, x: x[:],
  "ellipsis": lambda m, x: x[...],
  "squeeze": lambda m, x: m.squeeze(x),
  "atleast_1d": lambda m, x: m.atleast_1d(x),
  "atleast_2d": lambda m, x: m.atleast_2d(x),
  "real": lambda m, x: m.real(x),
  "conj": lambda m, x: m.conj(x),
  "transpose": lambda m, x: m.transpose(x),
  "T": lambda m, x: x.T,
  "moveaxis_same": lambda m, x: m.moveaxis(x, 0, 0),
  "swapaxes": lambda m, x: x.swapaxes(0, -1),
  "clip_wide": lambda m, x: m.clip(x, -1e300, 1e300),
  "abs": lambda m, x: m.abs(x),
  "sum_no_axes": lambda m, x: m.sum(x, axis=()),
  "nan_to_num": lambda m, x: m.nan_to_num(x),
  "ascontiguousarray": lambda m, x: m.ascontiguousarray(x),
  "expand_squeeze": lambda m, x: m.squeeze(m.expand_dims(x, 0), 0),
  "concatenate_one": lambda m, x: m.concatenate([x]),
  "round0": lambda m, x: m.round(x, 3),
}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  st.sampled_from(sorted(SAME_OR_APART)), st.sampled_from([(4,), (2, 3), (1, 3)]), st.integers(0, 5)
)
def test_a_write_into_a_result_reaches_its_argument_as_in_numpy(name, shape, where):
  op = SAME_OR_APART[name]

  def f(m, x):
    x = x * 1.0  # an array the function made (not the caller's)
    y = op(m, x)
    idx = np.unravel_index(where % y.size, y.shape)
    y[idx] = 7.0
    return x, y

  x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
  want = f(np, x.copy())
  for path, got in [
    ("jit", primc.jit(lambda x: f(pnp, x))(x)),
    ("interpreted", primc.interpret(primc.make_program(lambda x: f(pnp, x))(x), x)),
  ]:
    for g, w, what in zip(got, want, ("the argument", "the result")):
      np.testing.assert_array_equal(g, w, err_msg=f"{name} {path}: {what}")


INDEX_ENTRIES = st.one_of(
  st.integers(-2, 1), st.none(), st.just(Ellipsis), st.just(slice(None)), st.just(slice(0, 1))
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.lists(INDEX_ENTRIES, max_size=4))
def test_which_basic_indices_copy_as_numpy_decides(ndim, entries):
  """`_views._copies` (whether x[idx] is numpy's copy, so a write into the base does not
  reach it) against numpy itself, for every mix of integers, new axes, an ellipsis and
  slices on arrays of 0 to 3 dims."""
  from primc.numpy import _views

  x = np.zeros((2,) * ndim)
  idx = tuple(entries)
  try:
    out = x[idx]
  except IndexError:
    return  # (too many indices, two ellipses: numpy refuses it)
  is_view = isinstance(out, np.ndarray) and np.shares_memory(out, x)
  assert _views._copies(idx, ndim) == (not is_view), (ndim, idx)
