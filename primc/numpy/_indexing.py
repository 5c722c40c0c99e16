"""Indexing: numpy's basic and advanced indexes, take, gather, index arithmetic,
and functional updates (`x.at[idx].set(v)`)."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.core import (
  PrimcError,
  PrimcIndexError,
  ShapedArray,
  ShapeError,
  index_error,
)
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _integer_typed,
  _axes,
  _op,
  array,
  asarray,
  astype,
  broadcast_shapes,
  broadcast_to,
  concatenate,
  moveaxis,
  ravel,
  reshape,
  shape,
  transpose,
)
from primc.numpy._ufuncs import add, clip, equal, floor_divide, mod, multiply, subtract, where
from primc.trace import Tracer, aval_of, stage_known, stages_directly


@_op
def slice(input, axes, starts, ends):
  """Paddle's slice: `input[starts[i]:ends[i]]` along each of `axes` (negative positions
  count from the end, positions past the end are clipped, as Python slices)."""
  return strided_slice(input, axes, starts, ends, [1] * len(axes))


@_op
def strided_slice(x, axes, starts, ends, strides):
  """Paddle's strided_slice: `x[starts[i]:ends[i]:strides[i]]` along each of `axes`
  (any nonzero stride, negative ones included)."""
  x = _as_array(x)
  nd = aval_of(x).ndim
  if not len(axes) == len(starts) == len(ends) == len(strides):
    raise ShapeError("axes, starts, ends and strides need one entry each")
  index = [builtins.slice(None)] * nd
  for a, lo, hi, st in zip(axes, starts, ends, strides):
    if int(st) == 0:
      raise ShapeError("strided_slice: a stride of 0")
    index[_axes(int(a), nd)[0]] = builtins.slice(int(lo), int(hi), int(st))
  return getitem(x, tuple(index))


def _slice_axis(x, axis, lo, hi):
  shape = aval_of(x).shape
  start = [0] * len(shape)
  limit = list(shape)
  start[axis], limit[axis] = lo, builtins.max(lo, hi)
  return P.slice_(x, start, limit)


def _index_array(k, axis: int, size: int):
  """An integer index array along an axis of `size`: a traced one as it is (the compiled
  code checks it), a constant one checked now and with negatives counted from the end."""
  if isinstance(k, Tracer):
    if aval_of(k).dtype not in ("int32", "int64"):
      raise PrimcIndexError(
        f"arrays used as indices must be of integer type, got {aval_of(k).dtype}"
      )
    return k
  a = np.asarray(k)
  if a.dtype.kind == "f" and a.size == 0:  # numpy reads an empty list as an integer index
    a = a.astype(np.int64)
  if a.dtype.kind not in "iu":
    raise PrimcIndexError(f"arrays used as indices must be of integer type, got {a.dtype}")
  return P.wrap_indices(a, size, axis).astype(np.int64 if a.dtype.itemsize > 4 else np.int32)


@_op
def take(x, indices, axis=None, mode="raise"):
  """numpy.take. `mode="raise"` (the default): negative indices count from the end; an
  index out of bounds raises IndexError (now for constant indices, at run time for traced
  ones). Asked for, `"wrap"` takes indices modulo the axis and `"clip"` clips them into
  it (negatives to 0), as numpy."""
  x = _as_array(x)
  if axis is None:
    x = reshape(x, (-1,))
    axis = 0
  axis = _axes(axis, aval_of(x).ndim)[0]
  n = aval_of(x).shape[axis]
  if mode not in ("raise", "wrap", "clip"):
    raise PrimcError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
  if mode != "raise":
    if n == 0:
      raise PrimcIndexError("take: cannot do a non-empty take from an empty axis")
    k = _as_array(indices)
    if aval_of(k).dtype not in ("int32", "int64"):
      raise PrimcIndexError(
        f"arrays used as indices must be of integer type, got {aval_of(k).dtype}"
      )
    indices = mod(k, n) if mode == "wrap" else clip(k, 0, n - 1)
  return P.gather(x, _index_array(indices, axis, n), axis)


def index_select(x, index, axis=0):
  """Paddle's index_select: rows (or entries along `axis`) picked by a 1-D index."""
  return take(x, index, axis)


def gather(x, index, axis=0):
  """Paddle's gather: like index_select."""
  return take(x, index, axis)


def _expand_index(idx, ndim: int, shape=None) -> list:
  """The index as a list of entries, one per dim of the array plus None for new axes:
  Ellipsis expanded into full slices (and kept after them, as a marker that takes no dim:
  numpy's placement of advanced-index dims depends on it), 0-d integer arrays as integers,
  boolean masks (known while tracing; checked against `shape` when given) as the integer
  arrays of their nonzero entries."""
  entries = idx if type(idx) is tuple else (idx,)
  if builtins.all(type(k) is builtins.slice or k is None or type(k) is int for k in entries):
    used = len(entries) - entries.count(None)  # (the common case, kept short)
    if used <= ndim:
      return [*entries, *[builtins.slice(None)] * (ndim - used)]
  out = []
  for k in list(idx) if isinstance(idx, tuple) else [idx]:
    if isinstance(k, Tracer):
      if aval_of(k).dtype == "bool":
        raise PrimcIndexError(
          "a boolean mask computed while tracing cannot index (the "
          "result's shape would depend on its values): use where()"
        )
      out.append(k)
    elif isinstance(k, (list, np.ndarray, bool, np.bool_)):
      a = np.asarray(k)
      if a.dtype == np.bool_ and a.ndim == 0:
        raise PrimcIndexError(f"indexing with a boolean scalar ({k!r}) is not supported")
      out.append(a if a.ndim or a.dtype == np.bool_ else operator_index(a))
    else:
      out.append(k)
  if builtins.sum(k is Ellipsis for k in out if not _is_array(k)) > 1:
    raise PrimcIndexError("an index can only have a single ellipsis ('...')")
  width = lambda k: k.ndim if _is_array(k) and k.dtype == np.bool_ else 1
  used = builtins.sum(
    width(k) for k in out if _is_array(k) or (k is not None and k is not Ellipsis)
  )
  if used > ndim:
    raise PrimcIndexError(
      f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
    )
  fill = [builtins.slice(None)] * (ndim - used)
  at = next((i for i, k in enumerate(out) if not _is_array(k) and k is Ellipsis), None)
  out = out + fill if at is None else out[:at] + fill + out[at:]
  expanded, dim = [], 0
  for k in out:  # masks become their nonzero positions, one array per dim they cover
    if _is_array(k) and k.dtype == np.bool_:
      covered = tuple(shape[dim : dim + k.ndim]) if shape is not None else k.shape
      if k.shape != covered:
        raise PrimcIndexError(
          f"boolean index did not match indexed array along axis {dim}; "
          f"size of axis is {covered} but size of corresponding "
          f"boolean index is {k.shape}"
        )
      expanded.extend(np.nonzero(k))
      dim += k.ndim
    else:
      expanded.append(k)
      dim += _takes_dim(k)
  return expanded


def _takes_dim(k) -> bool:
  """Whether an expanded index entry indexes a dim (None and the Ellipsis marker do not)."""
  return _is_array(k) or (k is not None and k is not Ellipsis)


def _is_array(k) -> bool:
  return isinstance(k, (np.ndarray, Tracer))


def operator_index(k) -> int:
  """An integer index (ints, numpy integers, 0-d integer arrays), as numpy accepts it."""
  a = np.asarray(k) if not isinstance(k, Tracer) else None
  if a is not None and a.ndim == 0 and a.dtype.kind in "iu":
    return int(a)
  raise PrimcIndexError(
    f"only integers, slices (`:`), ellipsis (`...`), None and integer "
    f"or boolean arrays are valid indices, got {type(k).__name__} "
    f"({k!r:.40})"
  )


def _slice_bounds(k: builtins.slice, n: int) -> tuple[bool, int, int, int]:
  """(reversed, start, limit, stride) with a positive stride: numpy's slice `k` of a dim
  of size n, read from the dim as it is or from the reversed dim."""
  lo, hi, st = k.indices(n)
  m = len(range(lo, hi, st))
  if m == 0:
    return False, 0, 0, 1
  if st < 0:
    return True, n - 1 - lo, n - 1 - lo + (m - 1) * -st + 1, -st
  return False, lo, lo + (m - 1) * st + 1, st


def _basic(x, dims):
  """x with each dim indexed by its entry: a slice (any step) keeps the dim, an integer
  leaves a unit dim (dropped by the caller), an array keeps the whole dim (for later)."""
  shape = aval_of(x).shape
  flips, start, limit, strides = [], [], [], []
  for dim, (k, n) in enumerate(zip(dims, shape)):
    if isinstance(k, builtins.slice):
      flip, lo, hi, st = _slice_bounds(k, n)
      flips += [dim] if flip else []
    elif _is_array(k):
      lo, hi, st = 0, n, 1
    else:
      k = k if type(k) is int else operator_index(k)
      if not -n <= k < n:
        raise index_error(k, dim, n)
      lo, hi, st = k % n, k % n + 1, 1
    start.append(lo), limit.append(hi), strides.append(st)
  if flips:
    x = P.rev(x, flips)
  whole = tuple(start) == (0,) * len(shape) and tuple(limit) == shape and set(strides) <= {1}
  return x if whole else P.slice_(x, start, limit, strides)


def getitem(x, idx):
  """numpy indexing, for values and gradients: integers (negative from the end; out of
  bounds an IndexError), slices with any step, None, Ellipsis, integer arrays (constant or
  traced; several broadcast together, their dims placed as numpy places them) and boolean
  masks known while tracing."""
  if type(idx) is int and stages_directly(x) and x.ir_var.aval.shape:
    n = x.ir_var.aval.shape[0]
    if -n <= idx < n:
      return _row(x, idx % n)  # (`x[t]` over a loop's t: the common index, kept short)
  return _indexed(x, idx)


def _indexed(x, idx):
  x = _as_array(x)
  entries = _expand_index(idx, aval_of(x).ndim, aval_of(x).shape)
  if builtins.any(_is_array(k) for k in entries):
    return _advanced_index(x, entries)
  x = _basic(x, [k for k in entries if _takes_dim(k)])
  sizes, out_shape = iter(aval_of(x).shape), []
  for k in entries:
    if k is None:
      out_shape.append(1)
    elif _takes_dim(k):
      n = next(sizes)
      if isinstance(k, builtins.slice):  # an integer's unit dim goes
        out_shape.append(n)
  return x if tuple(out_shape) == aval_of(x).shape else P.reshape(x, out_shape)


_indexed.__name__ = "getitem"  # (its errors name the user's op)
_indexed = _op(_indexed, recorded="traced")


def _row(x: Tracer, k: int) -> Tracer:
  """x[k] for 0 <= k < len(x), the equations `_indexed` stages (the row's slice, none of
  an axis of one; its axis dropped), staged directly (`trace.stage_known`)."""
  shape, dtype = x.ir_var.aval.shape, x.ir_var.aval.dtype
  if shape[0] != 1:
    start, limit = (k,) + (0,) * (len(shape) - 1), (k + 1,) + shape[1:]
    params = {"start_indices": start, "limit_indices": limit, "strides": (1,) * len(shape)}
    x = stage_known(P.slice_p, x, params, ShapedArray((1,) + shape[1:], dtype))
  return stage_known(P.reshape_p, x, {"new_sizes": shape[1:]}, ShapedArray(shape[1:], dtype))


def _shape_text(i) -> str:
  return str(aval_of(i).shape if isinstance(i, Tracer) else np.shape(i))


def _broadcast(i, b):
  return i if isinstance(i, Tracer) else np.broadcast_to(i, b)


def _flat_position(raw, b, adv, shape):
  """The position of x[i0, i1, ...] among the indexed dims `adv` merged in order (C
  order): each index checked against its own dim and negatives counted from its end
  first, a constant one now (`_index_array`), a traced one by gathering it from
  arange(size) along its dim, which checks it as any gather does. Merging keeps a
  gather's size that of B, where gathering one dim after another made B times the other
  dims' sizes."""
  sizes = [shape[d] for d in adv]
  big = int(np.prod(sizes, dtype=np.int64)) > np.iinfo(np.int32).max
  dtype = np.int64 if big or any(aval_of(i).dtype == "int64" for i in raw) else np.int32
  position = None
  for i, d, n in zip(raw, adv, sizes):
    if isinstance(i, Tracer):
      table = np.arange(n, dtype=dtype).reshape((1,) * d + (n,))  # (errors name dim d)
      i = reshape(P.gather(table, _index_array(broadcast_to(i, b), d, n), d), b)
    else:
      i = _index_array(_broadcast(i, b), d, n).astype(dtype)
    position = i if position is None else add(multiply(position, dtype(n)), i)
  return position


def _advanced_index(x, entries):
  """Integer-array indexing (numpy's advanced indexing): the index arrays, and integers
  beside them, broadcast to one shape B; B's dims stand where the indexed dims stood
  when those stand together in the index (no slice or None between them), else first."""
  dims = [k for k in entries if _takes_dim(k)]  # one per dim of x
  adv = [d for d, k in enumerate(dims) if not isinstance(k, builtins.slice)]
  x = _basic(x, [k if isinstance(k, builtins.slice) else builtins.slice(None) for k in dims])
  shape = aval_of(x).shape
  # integers are checked now (as numpy does), arrays once broadcast (none when B is empty)
  raw = [
    dims[d]
    if _is_array(dims[d])
    else _index_array(np.asarray(operator_index(dims[d])), d, shape[d])
    for d in adv
  ]
  try:
    b = broadcast_shapes(*(aval_of(i).shape if isinstance(i, Tracer) else i.shape for i in raw))
  except ShapeError:
    raise PrimcIndexError(
      "shape mismatch: indexing arrays could not be broadcast together "
      f"with shapes {' '.join(_shape_text(i) for i in raw)}"
    ) from None
  if len(adv) == 1:  # the index, checked
    index = _index_array(_broadcast(raw[0], b), adv[0], shape[adv[0]])
  else:  # one index into the indexed dims merged (their flat position): B's elements only
    index = _flat_position(raw, b, adv, shape)
  index = broadcast_to(_as_array(index), b)
  kinds = "".join(
    "N"
    if k is None
    else "E"
    if not _takes_dim(k)
    else "S"
    if isinstance(k, builtins.slice)
    else "A"
    for k in entries
  )
  first, last = kinds.index("A"), kinds.rindex("A")
  together = set(kinds[first : last + 1]) == {"A"}
  rest = [d for d in range(len(shape)) if d not in adv]
  if len(adv) == 1:  # gathered in place: B's dims where the indexed dim was
    out = P.gather(x, index, adv[0])
  else:  # the indexed dims moved first and merged into one, gathered at the flat positions
    merged = (int(np.prod([shape[d] for d in adv], dtype=np.int64)),)
    out = P.gather(
      reshape(transpose(x, adv + rest), merged + tuple(shape[d] for d in rest)), index, 0
    )
    at = kinds[:first].count("S") if together else 0  # slice dims before B's
    nb = len(b)
    out = transpose(out, [*range(nb, nb + at), *range(nb), *range(nb + at, nb + len(rest))])
  sizes, final = iter([shape[d] for d in rest]), ([] if together else list(b))
  for pos, kind in enumerate(kinds):  # None's unit dims, among the slice dims and B
    if kind == "N":
      final.append(1)
    elif kind == "S":
      final.append(next(sizes))
    elif pos == first and together:
      final.extend(b)
  return reshape(out, final)


# Functional updates: x.at[idx].set(v) / .add(v) / .multiply(v) (traced arrays are
# immutable). The positions come from numpy's own indexing of an arange, so every constant
# index numpy takes (ints, slices, None, ..., integer and boolean arrays) means what it
# means there, and one out of bounds is numpy's IndexError.


class _At:
  def __init__(self, x):
    self.x = x

  def __getitem__(self, idx):
    return _IndexUpdate(self.x, idx)


class _IndexUpdate:
  """`x.at[idx]`: `.set(v)`, `.add(v)`, `.multiply(v)` return new arrays; `.get()` is
  `x[idx]`."""

  def __init__(self, x, idx):
    self.x, self.idx = x, idx

  def get(self):
    return getitem(self.x, self.idx)

  def set(self, values):
    return index_update(self.x, self.idx, values, "set")

  def add(self, values):
    return index_update(self.x, self.idx, values, "add")

  def multiply(self, values):
    return index_update(self.x, self.idx, values, "multiply")


@_op
def index_update(x, idx, values, how="set"):
  """`x` with `values` set at, added at or multiplied into `x[idx]` (`x.at[idx]`):
  `set` keeps the last value where an index repeats (numpy's assignment), `add`
  accumulates repeats, `multiply` refuses them."""
  x = _as_array(x)
  shape, dtype = aval_of(x).shape, np.dtype(aval_of(x).dtype)
  leaves = idx if isinstance(idx, tuple) else (idx,)
  if builtins.any(isinstance(i, Tracer) for i in leaves):
    raise NotSupportedError(
      "x.at[...] with traced indices is not supported (constant "
      "indices are: ints, slices, integer or boolean arrays)"
    )
  pos = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[idx]
  values = broadcast_to(asarray(values, dtype.name), pos.shape)
  flat = pos.reshape(-1)
  if how == "add":
    return _scatter_flat(x, flat, values)
  if how == "multiply":
    if len(np.unique(flat)) != flat.size:
      raise NotSupportedError("x.at[idx].multiply with a repeated index is not supported")
    return multiply(x, _scatter_flat(P.full(shape, 1, dtype.name), flat, subtract(values, 1)))
  if how != "set":
    raise PrimcError(f"index_update: how must be 'set', 'add' or 'multiply', not {how!r}")
  last = {p: k for k, p in enumerate(flat)}  # position -> its last occurrence
  keep = np.array(sorted(last.values()), np.int64)
  untouched = np.ones(int(np.prod(shape, dtype=np.int64)), bool)
  untouched[flat] = False
  cleared = multiply(x, untouched.reshape(shape).astype(dtype))
  v = reshape(values, (-1,))
  if len(keep) != flat.size:
    v = take(v, keep.astype(np.int32))
  return _scatter_flat(cleared, flat[keep], v)


def _scatter_flat(x, flat, values):
  """x with `values` (in the order of the flat positions) added at those positions."""
  if flat.size == 0:
    return x
  shape = aval_of(x).shape
  out = P.scatter_add(reshape(x, (-1,)), np.asarray(flat, np.int32), reshape(values, (-1,)), 0)
  return reshape(out, shape)


@_op
def take_along_axis(arr, indices, axis):
  arr = _as_array(arr)
  idx = _as_array(indices)
  if axis is None:
    return take_along_axis(ravel(arr), idx, 0)
  nd = aval_of(arr).ndim
  ax = _axes(axis, nd)[0]
  if aval_of(idx).ndim != nd:
    raise ShapeError(
      f"take_along_axis: indices of rank {aval_of(idx).ndim} for an array of rank {nd}"
    )
  shape_ = aval_of(idx).shape
  key = tuple(
    idx if d == ax else np.arange(shape_[d]).reshape([-1 if e == d else 1 for e in range(nd)])
    for d in range(nd)
  )
  return getitem(arr, key)


def triu_indices_from(arr, k=0):
  s = shape(arr)
  return np.triu_indices(s[-2], k, s[-1])


def tril_indices_from(arr, k=0):
  s = shape(arr)
  return np.tril_indices(s[-2], k, s[-1])


def diag_indices_from(arr):
  s = shape(arr)
  if len(s) < 2 or len(set(s)) != 1:
    raise ShapeError(f"diag_indices_from needs an array of 2 or more equal axes, got {s}")
  return np.diag_indices(s[0], len(s))


@_op
def choose(a, choices, mode="raise"):
  """choices[a] elementwise (broadcast). An index out of range is numpy's ValueError for a
  constant `a`; a traced `a` needs mode='clip' or 'wrap' (its range is not known)."""
  n = len(choices)
  _integer_typed(a, "choose's indices")
  if isinstance(a, Tracer):
    if mode == "raise":
      raise NotSupportedError(
        "choose with a traced index array needs mode='clip' or 'wrap' "
        "(an index out of range cannot be checked while tracing)"
      )
    a = clip(a, 0, n - 1) if mode == "clip" else mod(a, n)
  else:
    a = np.asarray(a)
    if mode == "raise" and ((a < 0) | (a >= n)).any():
      raise ValueError("invalid entry in choice array")
    a = np.clip(a, 0, n - 1) if mode == "clip" else np.mod(a, n)
  out = _as_array(choices[-1])
  for k in range(n - 2, -1, -1):
    out = where(equal(a, k), choices[k], out)
  return out


@_op
def compress(condition, a, axis=None):
  """The entries of `a` (flattened when axis is None) where the constant `condition` is
  true."""
  if isinstance(condition, Tracer):
    raise NotSupportedError("compress with a traced condition (the result's length depends on it)")
  a, condition = _as_array(a), np.asarray(condition)
  if condition.ndim != 1:
    raise ShapeError(f"compress: condition must be a 1-d array, got shape {condition.shape}")
  if axis is None:
    a, axis = ravel(a), 0
  return take(a, np.nonzero(condition)[0], axis=axis)


@_op
def indices(dimensions, dtype=int, sparse=False):
  return (
    tuple(asarray(i) for i in np.indices(dimensions, dtype, sparse))
    if sparse
    else asarray(np.indices(dimensions, dtype))
  )


@_op
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
  """Flat indices of index arrays in an array of shape `dims`; a traced index out of range
  needs mode='clip' or 'wrap' (it cannot be checked while tracing)."""
  if not builtins.any(isinstance(i, Tracer) for i in multi_index):
    return asarray(
      np.ravel_multi_index(tuple(np.asarray(i) for i in multi_index), dims, mode, order)
    )
  if mode == "raise":
    raise NotSupportedError("ravel_multi_index of traced indices needs mode='clip' or 'wrap'")
  order_dims = list(range(len(dims)))[::-1] if order == "F" else list(range(len(dims)))
  flat = None
  for k in order_dims:
    i = astype(_as_array(multi_index[k]), "int64")
    i = clip(i, 0, dims[k] - 1) if mode == "clip" else mod(i, dims[k])
    flat = i if flat is None else add(multiply(flat, dims[k]), i)
  return flat


@_op
def unravel_index(indices, shape, order="C"):
  """The coordinates of flat indices in an array of `shape` (a tuple of int64 arrays)."""
  if order not in ("C", "F"):
    raise PrimcError(f"unravel_index: order must be 'C' or 'F', got {order!r}")
  if not isinstance(indices, Tracer):
    return tuple(asarray(c) for c in np.unravel_index(indices, shape, order))
  _integer_typed(indices, "unravel_index's indices")
  flat = astype(indices, "int64")
  dims = list(shape) if order == "C" else list(shape)[::-1]
  coords = []
  for n in dims[::-1]:  # the fastest-varying dimension first
    coords.append(mod(flat, n))
    flat = floor_divide(flat, n)
  coords = coords[::-1]
  return tuple(coords if order == "C" else coords[::-1])


@_op
def delete(arr, obj, axis=None):
  """arr without the entries `obj` (constant ints, slices or masks) along `axis`
  (flattened when None)."""
  arr = _as_array(arr)
  if axis is None:
    arr, axis = reshape(arr, (-1,)), 0
  n = aval_of(arr).shape[axis]
  return take(arr, np.delete(np.arange(n), obj), axis=axis)


@_op
def insert(arr, obj, values, axis=None):
  """`values` inserted before position `obj` (one int) along `axis` (flattened when None),
  broadcast as numpy does for one position."""
  arr = _as_array(arr)
  if axis is None:
    arr, axis = reshape(arr, (-1,)), 0
  if not isinstance(obj, (int, np.integer)):
    raise NotSupportedError(
      "insert at several positions (a sequence or slice obj) is not "
      "supported: insert at one int position, repeatedly"
    )
  shape = aval_of(arr).shape
  axis = axis % len(shape)
  at = int(obj) + (shape[axis] if obj < 0 else 0)
  if not 0 <= at <= shape[axis]:
    raise PrimcIndexError(
      f"insert: index {obj} is out of bounds for axis {axis} of size {shape[axis]}"
    )
  values = array(values)
  values = reshape(values, (1,) * (len(shape) - aval_of(values).ndim) + aval_of(values).shape)
  values = moveaxis(values, 0, axis)
  block = list(shape)
  block[axis] = aval_of(values).shape[axis]
  values = astype(broadcast_to(values, block), aval_of(arr).dtype)
  before = take(arr, np.arange(at), axis=axis)
  after = take(arr, np.arange(at, shape[axis]), axis=axis)
  return concatenate([before, values, after], axis)
