"""Shape manipulation: reshaping, joining, splitting, flipping, padding."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.core import PrimcError, ShapeError
from primc.numpy._base import (
  _axis,
  _integer,
  _integers,
  _shape,
  NotSupportedError,
  _as_array,
  _axes,
  _is_python_scalar,
  _op,
  _with_weak,
  array,
  asarray,
  broadcast_shapes,
  broadcast_to,
  concatenate,
  ravel,
  reshape,
  shape,
  transpose,
)
from primc.numpy._creation import ones, zeros, zeros_like
from primc.numpy._indexing import getitem, take
from primc.numpy._ufuncs import add, greater_equal, less_equal, multiply, subtract, where
from primc.trace import aval_of


def squeeze(x, axis=None):
  x = _as_array(x)
  shape = aval_of(x).shape
  axes = [i for i, n in enumerate(shape) if n == 1] if axis is None else _axes(axis, len(shape))
  return reshape(x, [n for i, n in enumerate(shape) if i not in axes])


def concat(x, axis=0):
  """Paddle's concat: `x` is the list of arrays."""
  return concatenate(x, axis)


@_op
def split(x, indices_or_sections=None, axis=0, num_or_sections=None):
  """numpy.split: an int splits into equal parts; a list gives the split points.

  Paddle's `num_or_sections=` takes an int (equal parts) or a list of section sizes, one
  of which may be -1 (the rest)."""
  if num_or_sections is not None:
    if isinstance(num_or_sections, (int, np.integer)):
      indices_or_sections = num_or_sections
    else:
      return split_sizes(x, num_or_sections, axis)
  if indices_or_sections is None:
    raise PrimcError("split needs indices_or_sections (or num_or_sections)")
  x = _as_array(x)
  shape = aval_of(x).shape
  axis = _axis(axis, len(shape))
  n = shape[axis]
  if isinstance(indices_or_sections, (int, np.integer)):
    k = int(indices_or_sections)
    if k <= 0 or n % k:
      raise ShapeError(f"array of size {n} along axis {axis} cannot be split into {k} equal parts")
    points = [n // k * i for i in range(1, k)]
  else:
    points = _integers(indices_or_sections, "split's points").tolist()
  return _split_at(x, axis, points)


def _split_at(x, axis, points):
  """The pieces x[lo:hi] along `axis` between consecutive points (Python's slice rules,
  as numpy: points past the end give empty pieces)."""
  bounds = [0] + list(points) + [None]
  lead = (builtins.slice(None),) * axis
  return [getitem(x, lead + (builtins.slice(lo, hi),)) for lo, hi in zip(bounds[:-1], bounds[1:])]


@_op
def array_split(x, indices_or_sections, axis=0):
  """numpy.array_split: like split, but k sections need not be equal (the first n % k are
  one longer)."""
  x = _as_array(x)
  axis = _axes(axis, aval_of(x).ndim)[0]
  if not isinstance(indices_or_sections, (int, np.integer)):
    return _split_at(x, axis, _integers(indices_or_sections, "split's points").tolist())
  n, k = aval_of(x).shape[axis], int(indices_or_sections)
  if k <= 0:
    raise ShapeError(f"array_split needs a positive number of sections, got {k}")
  sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
  return _split_at(x, axis, [int(p) for p in np.cumsum(sizes)[:-1]])


def _split_along(name, axis_of, min_ndim):
  def fn(x, indices_or_sections):
    x = _as_array(x)
    nd = aval_of(x).ndim
    if nd < min_ndim:
      raise ShapeError(f"{name} needs an array of rank >= {min_ndim}, got {aval_of(x).shape}")
    return split(x, indices_or_sections, axis_of(nd))

  fn.__name__ = fn.__qualname__ = name
  return _op(fn)


hsplit = _split_along("hsplit", lambda nd: 1 if nd > 1 else 0, 1)
vsplit = _split_along("vsplit", lambda nd: 0, 2)
dsplit = _split_along("dsplit", lambda nd: 2, 3)


def split_sizes(x, sizes, axis=0):
  """Paddle-style split by section sizes (one size may be -1: the rest)."""
  n = aval_of(_as_array(x)).shape[_axes(axis, aval_of(_as_array(x)).ndim)[0]]
  sizes = [_integer(k, "a section size") for k in sizes]
  if sizes.count(-1) > 1 or builtins.any(k < -1 for k in sizes):
    raise ShapeError(f"section sizes {sizes}: at most one -1 and no other negative size")
  if -1 in sizes:
    sizes[sizes.index(-1)] = n - (builtins.sum(sizes) + 1)
  if builtins.sum(sizes) != n or builtins.any(k < 0 for k in sizes):
    raise ShapeError(f"section sizes {sizes} do not add up to the axis size {n}")
  return split(x, [int(p) for p in np.cumsum(sizes)[:-1]], axis)


# Composed of primitives: their derivatives (any order), batching and compiled code come
# from those of the primitives.


def _pad_axis(x, axis, before, after):
  return P.pad(x, [(before, after, 0) if d == axis else (0, 0, 0) for d in range(aval_of(x).ndim)])


def _one_axis(axis, ndim):
  """One axis (an integer: a tuple of axes is an error where numpy takes one)."""
  return _axis(axis, ndim)


@_op
def flip(m, axis=None):
  m = _as_array(m)
  axes = _axes(axis, aval_of(m).ndim)
  return P.rev(m, axes) if axes else m


def flipud(m):
  return flip(m, 0)


def fliplr(m):
  return flip(m, 1)


@_op
def rot90(m, k=1, axes=(0, 1)):
  m = _as_array(m)
  nd = aval_of(m).ndim
  a0, a1 = (_axis(a, nd) for a in axes)
  if a0 == a1 or nd < 2:
    raise ShapeError(f"rot90 needs two different axes of an array of rank >= 2, got {axes}")
  perm = list(range(nd))
  perm[a0], perm[a1] = perm[a1], perm[a0]
  k %= 4
  if k == 0:
    return m
  if k == 2:
    return flip(m, (a0, a1))
  return transpose(flip(m, a1), perm) if k == 1 else flip(transpose(m, perm), a1)


@_op
def roll(a, shift, axis=None):
  a = _as_array(a)
  if axis is None:
    return reshape(roll(ravel(a), shift, 0), aval_of(a).shape)
  shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  if len(shifts) != len(axes):
    shifts = shifts * len(axes) if len(shifts) == 1 else shifts
  if len(shifts) != len(axes):
    raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
  for s, ax in zip(shifts, axes):
    ax = _one_axis(ax, aval_of(a).ndim)
    n = aval_of(a).shape[ax]
    a = P.roll(a, int(s) % n if n else 0, ax)
  return a


_INDEX_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


@_op
def pad(array, pad_width, mode="constant", constant_values=0):
  """numpy.pad with mode "constant" (a scalar constant), or one of the modes that repeat
  the array's own elements ("edge", "reflect", "symmetric", "wrap", any width): each axis
  gathered at the positions numpy's pad of its indices gives."""
  x = _as_array(array)
  if mode in _INDEX_PAD_MODES:
    nd = aval_of(x).ndim
    widths = np.broadcast_to(_integers(pad_width, "pad's pad_width"), (nd, 2))
    for axis, (before, after) in enumerate(widths):
      n = aval_of(x).shape[axis]
      if before or after:
        if n == 0:
          raise ShapeError(f"pad with mode={mode!r} of an empty axis {axis}")
        x = take(x, np.pad(np.arange(n), (int(before), int(after)), mode=mode), axis=axis)
    return x
  if mode != "constant":
    raise NotSupportedError(
      f"pad with mode={mode!r} is not supported (modes 'constant', "
      f"{', '.join(map(repr, _INDEX_PAD_MODES))} are)"
    )
  if np.ndim(constant_values) != 0:
    raise NotSupportedError("pad with per-axis constant_values is not supported (a scalar is)")
  nd = aval_of(x).ndim
  widths = np.broadcast_to(_integers(pad_width, "pad's pad_width"), (nd, 2))
  if (widths < 0).any():
    raise ShapeError(f"pad widths must be non-negative, got {pad_width}")
  config = [(int(b), int(e), 0) for b, e in widths]
  out = P.pad(x, config)
  if constant_values != 0:
    border = P.sub(
      P.scalar_like(1, out), P.pad(P.full(aval_of(x).shape, 1, aval_of(x).dtype), config)
    )
    out = add(out, multiply(border, constant_values))
  return out


@_op
def tile(A, reps):
  A = _as_array(A)
  reps = _shape(reps, "tile's reps")
  shape = aval_of(A).shape
  nd = builtins.max(len(shape), len(reps))
  shape = (1,) * (nd - len(shape)) + shape
  reps = (1,) * (nd - len(reps)) + reps
  A = reshape(A, shape)
  spread = [d for r, n in zip(reps, shape) for d in (r, n)]
  wide = P.broadcast_in_dim(A, spread, tuple(range(1, 2 * nd, 2)))
  return reshape(wide, [r * n for r, n in zip(reps, shape)])


@_op
def repeat(a, repeats, axis=None):
  a = _as_array(a)
  if not isinstance(repeats, (int, np.integer)):
    raise NotSupportedError("repeat with an array of repeats is not supported (an int is)")
  if axis is None:
    a, axis = ravel(a), 0
  shape = aval_of(a).shape
  axis = _one_axis(axis, len(shape))
  spread = list(shape[: axis + 1]) + [int(repeats)] + list(shape[axis + 1 :])
  dims = tuple(d if d <= axis else d + 1 for d in range(len(shape)))
  wide = P.broadcast_in_dim(a, spread, dims)
  return reshape(wide, shape[:axis] + (shape[axis] * int(repeats),) + shape[axis + 1 :])


def _triangle(m, k, lower: bool):
  m = _as_array(m)
  shape = aval_of(m).shape
  if len(shape) < 2:
    raise ShapeError(f"{'tril' if lower else 'triu'} needs an array of rank >= 2, got {shape}")
  rows, cols = P.iota(shape, len(shape) - 2), P.iota(shape, len(shape) - 1)
  keep = (less_equal if lower else greater_equal)(subtract(cols, rows), int(k))
  return where(keep, m, zeros_like(m))


@_op
def tril(m, k=0):
  return _triangle(m, k, lower=True)


@_op
def triu(m, k=0):
  return _triangle(m, k, lower=False)


def _atleast(a, nd):
  a = _as_array(a)
  shape = aval_of(a).shape
  if len(shape) >= nd:
    return a
  return reshape(a, (1,) * (nd - len(shape)) + shape)  # numpy's atleast_1d/2d


@_op
def vstack(tup):
  return concatenate([_atleast(a, 2) for a in tup], 0)


row_stack = vstack


@_op
def hstack(tup):
  arrays = [_atleast(a, 1) for a in tup]
  return concatenate(arrays, 0 if aval_of(arrays[0]).ndim == 1 else 1)


@_op
def column_stack(tup):
  cols = []
  for a in tup:
    a = _as_array(a)
    cols.append(reshape(a, (aval_of(a).shape[0], 1)) if aval_of(a).ndim == 1 else _atleast(a, 2))
  return concatenate(cols, 1)


@_op
def append(arr, values, axis=None):
  if axis is None:
    return concatenate([ravel(arr), ravel(values)], 0)
  return concatenate([arr, values], axis)


class _Concatenator:
  """numpy's `r_` (items joined along axis 0) and `c_` (as columns, along the last axis):
  arrays, nested lists, scalars (weak: they take the arrays' dtype, as numpy) and slices
  (`0:3`, `0:1:5j`: numpy's ranges, constants). A leading directive string is not
  supported."""

  def __init__(self, name: str, columns: bool):
    self.name, self.columns = name, columns

  def __getitem__(self, key):
    items = key if isinstance(key, tuple) else (key,)
    if items and isinstance(items[0], str):
      raise NotSupportedError(
        f"{self.name}[{items[0]!r}, ...]: directive strings are not "
        f"supported; use concatenate or stack"
      )
    items = [
      np.r_[it]
      if isinstance(it, builtins.slice)
      else array(it)
      if isinstance(it, (list, tuple))
      else it
      for it in items
    ]
    strong = [aval_of(_as_array(it)).dtype for it in items if not _is_python_scalar(it)]
    dtype = np.result_type(*strong).name if strong else None
    for it in items:
      if _is_python_scalar(it) and dtype is not None:
        dtype = _with_weak(dtype, it)
    arrays = [asarray(it, dtype) for it in items]
    if self.columns:
      arrays = [reshape(a, (-1, 1)) if aval_of(a).ndim < 2 else a for a in arrays]
      return concatenate(arrays, -1)
    return concatenate([_atleast(a, 1) for a in arrays], 0)


r_ = _Concatenator("r_", columns=False)
c_ = _Concatenator("c_", columns=True)


@_op
def copy(a):
  return _as_array(a)


def ascontiguousarray(a, dtype=None):
  return asarray(a, dtype)


@_op
def swapaxes(x, axis1, axis2):
  x = _as_array(x)
  nd = aval_of(x).ndim
  a, b = _axes(axis1, nd)[0], _axes(axis2, nd)[0]
  perm = list(range(nd))
  perm[a], perm[b] = perm[b], perm[a]
  return transpose(x, perm)


@_op
def rollaxis(x, axis, start=0):
  x = _as_array(x)
  nd = aval_of(x).ndim
  axis = _one_axis(axis, nd)
  if not -nd <= start <= nd:
    raise ShapeError(f"rollaxis: start {start} is out of bounds for rank {nd}")
  start = start % (nd + 1) if start < 0 else start
  if axis < start:
    start -= 1
  perm = [d for d in range(nd) if d != axis]
  perm.insert(start, axis)
  return transpose(x, perm)


@_op
def atleast_1d(*arys):
  out = [_atleast(_as_array(a), 1) for a in arys]
  return out[0] if len(out) == 1 else out


@_op
def atleast_2d(*arys):
  out = [_atleast(_as_array(a), 2) for a in arys]
  return out[0] if len(out) == 1 else out


@_op
def atleast_3d(*arys):
  """numpy's: (N,) -> (1, N, 1), (M, N) -> (M, N, 1)."""
  out = []
  for a in arys:
    a = _as_array(a)
    s = aval_of(a).shape
    new = {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}.get(len(s), s)
    out.append(reshape(a, new))
  return out[0] if len(out) == 1 else out


@_op
def dstack(tup):
  return concatenate(atleast_3d(*tup) if len(tup) > 1 else [atleast_3d(*tup)], 2)


@_op
def meshgrid(*xi, indexing="xy", sparse=False, copy=True):
  """numpy.meshgrid; `sparse` gives each array with ones in the other dimensions."""
  if indexing not in ("xy", "ij"):
    raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
  xs = [ravel(_as_array(x)) for x in xi]
  n = len(xs)
  lengths = [aval_of(x).shape[0] for x in xs]
  if indexing == "xy" and n >= 2:
    lengths[0], lengths[1] = lengths[1], lengths[0]
  out = []
  for k, x in enumerate(xs):
    axis = (1 - k if k < 2 else k) if indexing == "xy" and n >= 2 else k
    shape_ = [1] * n if sparse else list(lengths)
    shape_[axis] = lengths[axis]
    out.append(P.broadcast_in_dim(x, tuple(shape_), (axis,)))
  return out


@_op
def broadcast_arrays(*args):
  arrays = [_as_array(a) for a in args]
  shape_ = broadcast_shapes(*(aval_of(a).shape for a in arrays))
  return [broadcast_to(a, shape_) for a in arrays]


def tri(N, M=None, k=0, dtype="float64"):
  return tril(ones((N, N if M is None else M), dtype), k)


@_op
def resize(a, new_shape):
  """a's elements repeated cyclically to fill `new_shape` (numpy.resize)."""
  a = ravel(_as_array(a))
  shape = _shape(new_shape, "resize's new_shape")
  if builtins.any(d < 0 for d in shape):
    raise ShapeError(f"resize: all elements of new_shape must be non-negative, got {shape}")
  size = int(np.prod(shape, dtype=np.int64))
  n = aval_of(a).shape[0]
  if n == 0 or size == 0:
    return zeros(shape, aval_of(a).dtype)
  return reshape(take(a, np.arange(size) % n), shape)


@_op
def matrix_transpose(x):
  x = _as_array(x)
  if aval_of(x).ndim < 2:
    raise ShapeError(f"matrix_transpose needs rank >= 2, got {aval_of(x).shape}")
  return swapaxes(x, -1, -2)


@_op
def permute_dims(a, axes=None):
  return transpose(a, axes)


@_op
def unstack(x, /, *, axis=0):  # (numpy's signature)
  x = _as_array(x)
  ax = _one_axis(axis, aval_of(x).ndim)
  return tuple(getitem(x, (builtins.slice(None),) * ax + (k,)) for k in range(shape(x)[ax]))
