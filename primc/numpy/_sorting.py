"""Sorting, searching and sets: argmax, sort, searchsorted, nonzero, unique."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, PrimcError, ShapeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _integers,
  _float,
  _op,
  _promote,
  array,
  asarray,
  astype,
  concatenate,
  expand_dims,
  moveaxis,
  ravel,
  reshape,
  stack,
)
from primc.numpy._creation import full_like, zeros_like
from primc.numpy._indexing import take, unravel_index
from primc.numpy._reductions import _nans_as, all, any, cumsum, max, min, sum
from primc.numpy._shape import _one_axis
from primc.numpy._ufuncs import (
  _nan_mask,
  add,
  equal,
  isnan,
  logical_and,
  logical_not,
  logical_or,
  maximum,
  not_equal,
  subtract,
)
from primc.numpy._ufuncs import where as _select
from primc.trace import Tracer, aval_of


def _arg_extreme(a, axis, reduce_fn):
  a = _as_array(a)
  if axis is None:
    a, axis = ravel(a), 0
  shape = aval_of(a).shape
  axis = _one_axis(axis, len(shape))
  n = shape[axis]
  if n == 0:
    raise ShapeError(
      f"attempt to get the arg{'max' if reduce_fn is max else 'min'} of an empty sequence"
    )
  best = reduce_fn(a, axis, keepdims=True)
  hit = equal(a, best)
  if aval_of(a).is_float:  # a NaN is the extreme (numpy): the first NaN wins
    hit = where(not_equal(best, best), not_equal(a, a), hit)
  rank_from_end = subtract(n - 1, P.iota(shape, axis, "int64"))
  first = P.reduce_max(where(hit, rank_from_end, P.full(shape, -1, "int64")), (axis,))
  return subtract(n - 1, first)


@_op
def argmax(a, axis=None, keepdims=False):
  out = _arg_extreme(a, axis, max)
  return _keep_arg(out, a, axis) if keepdims else out


def _keep_arg(out, a, axis):
  """An arg-reduction's result with its axis kept (all axes, of length 1, when None)."""
  ndim = aval_of(_as_array(a)).ndim
  if axis is None:
    return reshape(out, (1,) * ndim)
  return expand_dims(out, int(axis) % ndim)


@_op
def argmin(a, axis=None, keepdims=False):
  out = _arg_extreme(a, axis, min)
  return _keep_arg(out, a, axis) if keepdims else out


def _last_axis(a, axis):
  a = _as_array(a)
  if axis is None or aval_of(a).ndim == 0:
    return ravel(a), 0
  return a, _one_axis(axis, aval_of(a).ndim)


@_op
def argsort(a, axis=-1, kind=None, stable=None):
  """The indices that sort `a` along `axis` (stable whatever `kind` says; NaNs last), as
  numpy's int64."""
  a, axis = _last_axis(a, axis)
  order = P.argsort(moveaxis(a, axis, -1))
  return P.convert(moveaxis(order, -1, axis), "int64")


@_op
def sort(a, axis=-1, kind=None, stable=None):
  """`a` sorted along `axis` (NaNs last): the elements gathered by `argsort`, so the
  gradient flows back through the permutation (to each element from its place)."""
  if axis is not None:  # (a 0-d array has no axis -1, as numpy says; argsort takes one)
    _one_axis(axis, aval_of(_as_array(a)).ndim)
  a, axis = _last_axis(a, axis)
  moved = moveaxis(a, axis, -1)
  nd = aval_of(moved).ndim
  return moveaxis(P.gather(moved, P.argsort(moved), nd - 1, nd - 1), -1, axis)


@_op
def partition(a, kth, axis=-1):
  """Sorted along `axis`: a valid partition for every kth (numpy leaves the order
  around the kth element unspecified); each kth an integer in [-n, n), as numpy's."""
  a = _as_array(a)
  n = aval_of(a).size if axis is None else aval_of(a).shape[_one_axis(axis, aval_of(a).ndim)]
  k = _integers(kth, "partition's kth")
  if ((k < -n) | (k >= n)).any():
    raise ShapeError(f"partition: kth {kth!r:.40} out of bounds for an axis of length {n}")
  return sort(a, axis)


@_op
def searchsorted(a, v, side="left", sorter=None):
  """Insertion points of v into the sorted 1-D a (sorted by `sorter`'s order when given):
  the count of a's elements below v (at or below, side='right'), in numpy's order, where
  NaN is above every number and equal to itself; int64, as numpy."""
  if side not in ("left", "right"):
    raise PrimcError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
  a = _as_array(a)
  if aval_of(a).ndim != 1:
    raise ShapeError(f"searchsorted needs a 1-D sorted array, got shape {aval_of(a).shape}")
  if sorter is not None:
    a = take(a, sorter)
  v = _as_array(v)
  vs = aval_of(v).shape
  n = aval_of(a).shape[0]
  grid = vs + (n,)
  aa = P.broadcast_in_dim(a, grid, (len(vs),))
  vv = P.broadcast_in_dim(v, grid, tuple(range(len(vs))))
  aa, vv = _promote(aa, vv)
  below = P.lt(aa, vv) if side == "left" else P.le_p.bind(aa, vv)
  if aval_of(aa).dtype in FLOAT_DTYPES:  # NaN above every number, equal to itself
    nan_v = isnan(vv)
    below = logical_or(
      below, logical_and(nan_v, logical_not(isnan(aa))) if side == "left" else nan_v
    )
  return sum(P.convert(below, "int64"), -1)


@_op
def digitize(x, bins, right=False):
  """The index of the bin of each x (numpy.digitize): bins constant and monotonic."""
  edges = np.asarray(bins)
  if edges.ndim != 1:
    raise PrimcError(f"digitize: bins must be 1-D, got shape {edges.shape}")
  steps = np.diff(edges)
  if not (np.all(steps >= 0) or np.all(steps <= 0)):
    raise ValueError("digitize: bins must be monotonically increasing or decreasing")
  side = "left" if right else "right"
  if edges.size > 1 and edges[0] > edges[-1]:  # decreasing: numpy counts from the end
    return subtract(edges.size, searchsorted(edges[::-1].copy(), x, side=side))
  return searchsorted(edges, x, side=side)


@_op
def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
  """Whether each element is among the (constant or traced) test_elements (NaN is among
  none, as numpy's); `assume_unique` and `kind` choose numpy's algorithm, not the result:
  accepted."""
  element = _as_array(element)
  tests = ravel(array(test_elements))
  grid = aval_of(element).shape + aval_of(tests).shape
  nd = aval_of(element).ndim
  hit = (
    any(
      equal(
        P.broadcast_in_dim(element, grid, tuple(range(nd))), P.broadcast_in_dim(tests, grid, (nd,))
      ),
      -1,
    )
    if aval_of(tests).shape[0]
    else full_like(element, False, "bool")
  )
  return logical_not(hit) if invert else hit


@_op
def nanargmax(a, axis=None, keepdims=False):
  """numpy.nanargmax. A slice of NaNs only: ValueError for a known array, as numpy; -1 for
  a traced one (its values are not known while tracing), as JAX."""
  return _nan_arg(a, axis, keepdims, argmax, -np.inf)


@_op
def nanargmin(a, axis=None, keepdims=False):
  """numpy.nanargmin (a slice of NaNs only: as `nanargmax`)."""
  return _nan_arg(a, axis, keepdims, argmin, np.inf)


def _nan_arg(a, axis, keepdims, arg, fill):
  a = _float(a)
  found = arg(_nans_as(a, fill), axis, keepdims)
  none = all(_nan_mask(a), axis, keepdims)
  if not isinstance(none, Tracer):
    if np.any(none):
      raise ValueError("All-NaN slice encountered")
    return found
  return where(none, full_like(found, -1), found)


def _first_true(mask, size: int, fill_value):
  """The flat positions of the first `size` true entries of the 1-D bool `mask`, in order,
  padded with `fill_value`: each found where the running count of trues reaches it."""
  n = aval_of(mask).shape[0]
  count = cumsum(astype(mask, "int64"))
  grid = (size, n)
  hits = logical_and(
    P.broadcast_in_dim(mask, grid, (1,)),
    equal(P.broadcast_in_dim(count, grid, (1,)), add(P.iota(grid, 0, "int64"), 1)),
  )
  positions = sum(where(hits, P.iota(grid, 1, "int64"), 0), 1)
  return where(any(hits, 1), positions, fill_value)


def _static_size(name, size, a):
  """Whether `a` is traced (then `size` must be given: the result's length would depend
  on the values)."""
  if isinstance(a, Tracer) and size is None:
    raise NotSupportedError(
      f"{name} of a traced array without size= (its length depends on "
      f"the values): pass size= (and fill_value=), as in JAX"
    )
  return isinstance(a, Tracer)


def _padded(values, size, fill_value):
  """numpy's result cut or padded to `size` (JAX's size= on concrete arrays)."""
  values = np.asarray(values)
  if size is None:
    return values
  out = np.full((size,) + values.shape[1:], 0 if fill_value is None else fill_value, values.dtype)
  out[: builtins.min(size, len(values))] = values[:size]
  return out


@_op
def flatnonzero(a, *, size=None, fill_value=None):
  """The flat indices of a's nonzero entries (int64); traced, the first `size` of them,
  padded with fill_value (0 by default), as JAX."""
  if not _static_size("flatnonzero", size, a):
    return asarray(_padded(np.flatnonzero(np.asarray(a)), size, fill_value))
  flat = ravel(_as_array(a))
  return _first_true(
    not_equal(flat, zeros_like(flat)), int(size), 0 if fill_value is None else fill_value
  )


@_op
def nonzero(a, *, size=None, fill_value=None):
  """A tuple of index arrays, one per dimension, of a's nonzero entries (see flatnonzero
  for size= and fill_value=, which may be a tuple, one per dimension)."""
  shape = aval_of(_as_array(a)).shape
  fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * len(shape)
  if not _static_size("nonzero", size, a):
    return tuple(asarray(_padded(i, size, f)) for i, f in zip(np.nonzero(np.asarray(a)), fills))
  flat = flatnonzero(a, size=size, fill_value=-1)
  coords = unravel_index(maximum(flat, 0), shape)
  return tuple(where(equal(flat, -1), 0 if f is None else f, c) for c, f in zip(coords, fills))


@_op
def argwhere(a, *, size=None, fill_value=None):
  """The indices of a's nonzero entries as rows (n, ndim); size= as nonzero's."""
  if not _static_size("argwhere", size, a):
    return asarray(_padded(np.argwhere(np.asarray(a)), size, fill_value))
  return stack(nonzero(a, size=size, fill_value=fill_value), axis=-1)


@_op
def unique(
  ar,
  return_index=False,
  return_inverse=False,
  return_counts=False,
  axis=None,
  *,
  equal_nan=True,
  sorted=True,
  size=None,
  fill_value=None,
):
  """The sorted distinct values of ar (flattened), NaNs one value unless `equal_nan` is
  False (numpy's; `sorted=False` allows any order, and gets numpy's sorted one). Traced:
  the first `size` of them, padded with fill_value (the smallest value by default), as
  JAX; return_index, return_inverse, return_counts and axis are supported on constant
  arrays only."""
  extra = return_index or return_inverse or return_counts or axis is not None
  if not isinstance(ar, Tracer):
    out = np.unique(
      np.asarray(ar), return_index, return_inverse, return_counts, axis, equal_nan=equal_nan
    )
    if size is not None and not extra:
      if fill_value is None:
        fill_value = out.min() if out.size else 0
      out = _padded(out, size, fill_value)
    return tuple(asarray(o) for o in out) if extra else asarray(out)
  _static_size("unique", size, ar)
  if extra:
    raise NotSupportedError(
      "unique of a traced array with return_index, return_inverse, "
      "return_counts or axis is not supported"
    )
  s = sort(ravel(_as_array(ar)))  # (NaNs last)
  differs = not_equal(s[1:], s[:-1])
  if equal_nan and aval_of(s).dtype in FLOAT_DTYPES:  # a NaN after a NaN is the same value
    differs = logical_and(differs, logical_not(logical_and(isnan(s[1:]), isnan(s[:-1]))))
  first = concatenate([P.full((1,), True, "bool"), differs])
  idx = _first_true(first, int(size), -1)
  values = take(s, maximum(idx, 0))
  fill = s[0] if fill_value is None else fill_value
  return where(equal(idx, -1), fill, values)


@_op
def where(condition, x=None, y=None):
  """numpy.where: x where condition holds, else y; with condition alone, `nonzero`."""
  if x is None and y is None:
    return nonzero(condition)
  return _select(condition, x, y)
