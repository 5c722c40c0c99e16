"""Reductions and scans: sum, mean, max, var, std, prod, cumsum, diff, any, all."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, PrimcError, ShapeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _axes,
  _integer,
  _float,
  _op,
  asarray,
  astype,
  broadcast_to,
  concatenate,
  moveaxis,
  ravel,
  reshape,
)
from primc.numpy._creation import full_like, zeros_like
from primc.numpy._indexing import _slice_axis
from primc.numpy._shape import _one_axis, pad
from primc.numpy._ufuncs import (
  _nan_mask,
  _truth,
  add,
  bitwise_not,
  divide,
  logical_not,
  maximum,
  multiply,
  negative,
  not_equal,
  sqrt,
  stop_gradient,
  subtract,
  where,
)
from primc.trace import aval_of, size_constant


def _accumulated(a, dtype):
  """`a` in the dtype numpy's sum, prod, cumsum, cumprod and trace accumulate it in:
  `dtype` when given, else the default integer (int64) for bools and narrower integers,
  else its own (a sum of int32 values does not wrap at 2^31)."""
  a = asarray(a, dtype)
  if dtype is None and aval_of(a).dtype in ("bool", "int8", "int16", "int32"):
    a = P.convert(a, "int64")
  elif dtype is None and aval_of(a).dtype in ("uint8", "uint16", "uint32"):
    a = P.convert(a, "uint64")  # (numpy's unsigned default)
  return a


@_op(recorded=True)
def sum(x, axis=None, keepdims=False, dtype=None, initial=None, where=None):
  """numpy.sum (integers and bools summed in int64, as numpy); `where` (a mask broadcast
  against x) leaves entries out, `initial` is added."""
  x = _accumulated(x, dtype)
  a = aval_of(x)
  if where is not None:
    x = _masked(x, where, 0)
  axes = _axes(axis, a.ndim)
  out = P.reduce_sum(x, axes) if axes else x
  out = _keep(out, a.shape, axes) if keepdims else out
  return out if initial is None else add(out, asarray(initial, aval_of(out).dtype))


def _kept(where, x, axis, keepdims):
  """How many entries of x the mask `where` (broadcast to x's shape) keeps, in x's dtype."""
  mask = broadcast_to(asarray(where, "bool"), aval_of(x).shape)
  return sum(astype(mask, aval_of(x).dtype), axis, keepdims)


def _masked(x, mask, fill):
  """x where `mask` (broadcast to x's shape), `fill` elsewhere."""
  mask = broadcast_to(asarray(mask, "bool"), aval_of(x).shape)
  return P.select(mask, x, P.full(aval_of(x).shape, fill, aval_of(x).dtype))


def _keep(out, shape, axes):
  return reshape(out, [1 if i in axes else n for i, n in enumerate(shape)])


@_op(recorded=True)
def mean(x, axis=None, keepdims=False, dtype=None, where=None):
  """numpy.mean; over the entries `where` is true when it is given."""
  x = _float(x) if dtype is None else asarray(x, dtype)
  if where is not None:
    return divide(sum(x, axis, keepdims, where=where), _kept(where, x, axis, keepdims))
  a = aval_of(x)
  axes = _axes(axis, a.ndim)
  count = int(np.prod([a.shape[i] for i in axes], dtype=np.int64))
  total = sum(x, axis, keepdims)
  shape, dtype = aval_of(total).shape, aval_of(total).dtype
  divisor = size_constant(count, dtype)  # not a value rewrites read: sizes are not code
  if shape:
    divisor = P.broadcast_in_dim(divisor, shape, [])
  return P.div(total, divisor)


_mean = mean  # (for functions with a `mean=` parameter)


@_op(recorded=True)
def max(x, axis=None, keepdims=False, initial=None, where=None):
  """numpy.max; `initial` takes part (and is the result of an empty reduction); `where`
  (a mask, with `initial`, as numpy requires) leaves entries out."""
  x = _as_array(x)
  a = aval_of(x)
  if a.dtype == "bool":  # numpy's maximum of bools: any
    return astype(max(astype(x, "int32"), axis, keepdims, initial, where), "bool")
  if where is not None:
    if initial is None:
      raise PrimcError("max with where= needs initial= (numpy's rule: the maximum has no identity)")
    x = _masked(x, where, initial)
  axes = _axes(axis, a.ndim)  # (initial: in x's dtype, as numpy casts it)
  if initial is not None and builtins.any(a.shape[i] == 0 for i in axes):  # over nothing
    least = -np.inf if a.dtype in FLOAT_DTYPES else np.iinfo(a.dtype).min  # (then initial)
    out = P.full(tuple(n for i, n in enumerate(a.shape) if i not in axes), least, a.dtype)
  else:
    out = P.reduce_max(x, axes) if axes else x
  out = _keep(out, a.shape, axes) if keepdims else out
  return out if initial is None else maximum(out, asarray(initial, aval_of(out).dtype))


amax = max


@_op(recorded=True)
def min(x, axis=None, keepdims=False, initial=None, where=None):
  """numpy.min: the maximum of the negated values, negated; of integers the maximum of
  their complements (`~x = -x - 1` reverses the order without overflowing: `-x` of the
  least integer is itself)."""
  x = _as_array(x)
  dtype = aval_of(x).dtype
  if dtype == "bool":
    return astype(min(astype(x, "int32"), axis, keepdims, initial, where), "bool")
  flip = bitwise_not if dtype in ("int32", "int64") else negative
  init = None if initial is None else flip(asarray(initial, dtype))
  return flip(max(flip(x), axis, keepdims, init, where))


amin = min


def _correction(ddof, correction):
  """numpy 2's `correction=`, another name for `ddof`."""
  if correction is None:
    return ddof
  if ddof:
    raise PrimcError("var/std: ddof and correction can't be provided simultaneously")
  return correction


@_op
def var(
  x, axis=None, keepdims=False, ddof=0, *, dtype=None, where=None, mean=None, correction=None
):
  """numpy.var; `mean` (of the shape keepdims=True gives) is used instead of computing
  it, `where` (a mask broadcast against x) leaves entries out, `correction` is `ddof`."""
  ddof = _correction(ddof, correction)
  x = _as_array(x) if dtype is None else asarray(x, dtype)
  m = _mean(x, axis, keepdims=True, where=where) if mean is None else _as_array(mean)
  d = subtract(x, m)
  if where is not None:
    total = sum(multiply(d, d), axis, keepdims, where=where)
    dof = maximum(subtract(_kept(where, d, axis, keepdims), asarray(ddof, aval_of(d).dtype)), 0)
    return divide(total, dof)  # no degrees of freedom left: inf or nan, as numpy
  if not ddof:
    return _mean(multiply(d, d), axis, keepdims)
  a = aval_of(d)
  count = int(np.prod([a.shape[i] for i in _axes(axis, a.ndim)], dtype=np.int64)) - ddof
  total = sum(multiply(d, d), axis, keepdims)
  # no degrees of freedom left (ddof >= n): divided by 0, inf or nan, as numpy
  divisor = size_constant(builtins.max(count, 0), aval_of(total).dtype)
  if aval_of(total).shape:
    divisor = P.broadcast_in_dim(divisor, aval_of(total).shape, [])
  return P.div(total, divisor)


@_op
def diff(a, n=1, axis=-1, prepend=None, append=None):
  """numpy's `diff`; `prepend`/`append` (a scalar spread over the axis, or an array) are
  joined to `a` along `axis` first, with numpy's promotion (None: nothing joined)."""
  a = _as_array(a)
  n = _integer(n, "diff's order n")
  if n < 0:
    raise PrimcError(f"diff: order must be non-negative but got {n}")
  axis = _one_axis(axis, aval_of(a).ndim)
  if n == 0:  # (numpy's: `a` itself, nothing joined)
    return a
  if prepend is not None or append is not None:

    def edge(v):
      v = _as_array(v)
      if aval_of(v).ndim == 0:
        shape = list(aval_of(a).shape)
        shape[axis] = 1
        v = broadcast_to(v, tuple(shape))
      return v

    a = concatenate(
      [
        *([edge(prepend)] if prepend is not None else []),
        a,
        *([edge(append)] if append is not None else []),
      ],
      axis=axis,
    )
  for _ in range(n):
    m = aval_of(a).shape[axis]
    a = (not_equal if aval_of(a).dtype == "bool" else subtract)(  # (numpy's, of bools)
      _slice_axis(a, axis, builtins.min(1, m), m), _slice_axis(a, axis, 0, builtins.max(0, m - 1))
    )
  return a


def _scan_input(a, axis, dtype):
  a = _accumulated(a, dtype)
  if axis is None:
    return ravel(a), 0
  return a, _one_axis(axis, aval_of(a).ndim)


@_op
def cumsum(a, axis=None, dtype=None):
  """numpy.cumsum: left to right, as numpy adds (`cumsum` primitive)."""
  return _accumulate_along(P.cumsum, *_scan_input(a, axis, dtype))


@_op
def cumprod(a, axis=None, dtype=None):
  """numpy.cumprod: left to right, as numpy multiplies (an overflow or underflow on the
  way gives numpy's inf, 0 or NaN, as `prod` does)."""
  return _accumulate_along(P.cumprod, *_scan_input(a, axis, dtype))


def _accumulate_along(prim_fn, a, axis):
  """`prim_fn` (along the last axis) applied along `axis`."""
  last = aval_of(a).ndim - 1
  if axis == last:
    return prim_fn(a)
  return moveaxis(prim_fn(moveaxis(a, axis, last)), last, axis)


@_op(recorded=True)
def prod(a, axis=None, keepdims=False, dtype=None, initial=None, where=None):
  """numpy.prod: left to right, as numpy multiplies (an overflow or underflow on the way
  gives numpy's inf, 0 or NaN); integers and bools multiplied in int64, as numpy. `where`
  (a mask broadcast against a) leaves entries out; `initial` is the first factor."""
  a = _accumulated(a, dtype)
  if where is not None:
    a = _masked(a, where, 1)
  shape = aval_of(a).shape
  axes = _axes(axis, len(shape))
  if initial is None:
    out = P.reduce_prod(a, axes)
  else:  # numpy starts from `initial`: it goes first along the reduced elements
    flat, _ = P.axes_last(a, shape, axes)
    rows = list(aval_of(flat).shape[:-1])
    first = P.full(rows + [1], initial, aval_of(a).dtype)
    out = P.reduce_prod(P.concatenate([first, flat], len(rows)), (len(rows),))
  return _keep(out, shape, axes) if keepdims else out


@_op
def std(
  a, axis=None, ddof=0, keepdims=False, *, dtype=None, where=None, mean=None, correction=None
):
  """numpy.std (the keywords as `var`'s). Over single elements (ddof=0) it is the
  constant 0, derivatives 0 too (as autograd; sqrt's derivative at a zero variance would
  be 0/0 elsewhere)."""
  ddof = _correction(ddof, correction)
  v = var(a, axis, keepdims, ddof=ddof, dtype=dtype, where=where, mean=mean)
  shape = aval_of(_as_array(a)).shape
  if not ddof and where is None and builtins.all(shape[i] == 1 for i in _axes(axis, len(shape))):
    return multiply(stop_gradient(v), 0)
  return sqrt(v)


@_op
def any(a, axis=None, keepdims=False, *, where=None):
  """numpy.any (False over nothing); `where` leaves entries out."""
  a = max(P.convert(_truth(a), "int32"), axis, keepdims, initial=0, where=where)
  return P.gt(a, zeros_like(a))


@_op
def all(a, axis=None, keepdims=False, *, where=None):
  """numpy.all (True over nothing); `where` leaves entries out."""
  return logical_not(any(logical_not(a), axis, keepdims, where=where))


@_op
def count_nonzero(a, axis=None, keepdims=False):
  return sum(P.convert(_truth(a), "int64"), axis, keepdims)


@_op
def ptp(a, axis=None, keepdims=False):
  return subtract(max(a, axis, keepdims), min(a, axis, keepdims))


def _nans_as(a, fill):
  """`a` with its NaNs replaced by `fill` (integers and bools have none: `a` itself, so
  the nan- functions of integers are the plain ones, in numpy's dtypes)."""
  a = _as_array(a)
  if aval_of(a).dtype not in FLOAT_DTYPES:
    return a
  return where(_nan_mask(a), full_like(a, fill), a)


def _cumulative(scan, name, initial):
  def fn(x, /, *, axis=None, dtype=None, include_initial=False):  # (numpy's signature)
    x = _as_array(x) if dtype is None else asarray(x, dtype)
    if aval_of(x).ndim == 0:  # numpy: a 0-d array is scanned as one element
      x = reshape(x, (1,))
    if axis is None:
      if aval_of(x).ndim > 1:
        raise ShapeError(f"{name} of an array of rank > 1 needs axis=")
      axis = 0
    out = scan(x, axis)
    if include_initial:  # the empty prefix first: 0 for a sum, 1 for a product
      ax = _axes(axis, aval_of(out).ndim)[0]
      width = [(1, 0) if d == ax else (0, 0) for d in range(aval_of(out).ndim)]
      out = pad(out, width, constant_values=initial)
    return out

  fn.__name__ = fn.__qualname__ = name
  return _op(fn)


cumulative_sum = _cumulative(cumsum, "cumulative_sum", 0)
cumulative_prod = _cumulative(cumprod, "cumulative_prod", 1)


@_op
def ediff1d(ary, to_end=None, to_begin=None):
  d = diff(ravel(_as_array(ary)))
  parts = (
    ([ravel(_as_array(to_begin))] if to_begin is not None else [])
    + [d]
    + ([ravel(_as_array(to_end))] if to_end is not None else [])
  )
  return concatenate(parts, 0) if len(parts) > 1 else d


@_op
def gradient(f, *varargs, axis=None, edge_order=1):
  """numpy.gradient with scalar spacings: central differences inside, one-sided ones of
  `edge_order` 1 at the ends (edge_order=2: second-order one-sided, as numpy)."""
  f = _float(f)
  nd = aval_of(f).ndim
  axes = (
    list(range(nd))
    if axis is None
    else list(_axes(axis, nd))
    if not isinstance(axis, int)
    else [_axes(axis, nd)[0]]
  )
  if len(varargs) == 0:
    spacings = [1.0] * len(axes)
  elif len(varargs) == 1:
    spacings = [varargs[0]] * len(axes)
  else:
    spacings = list(varargs)
  if len(spacings) != len(axes) or not builtins.all(np.ndim(h) == 0 for h in spacings):
    raise NotSupportedError("gradient with coordinate arrays (scalar spacings are supported)")
  if edge_order not in (1, 2):
    raise ValueError("gradient: edge_order must be 1 or 2")
  outs = []
  for ax, h in zip(axes, spacings):
    n = aval_of(f).shape[ax]
    if n < edge_order + 1:
      raise ShapeError(f"gradient needs at least {edge_order + 1} points along axis {ax}")
    take = lambda lo, hi: _slice_axis(f, ax, lo, hi)
    h = float(h)
    inner = divide(subtract(take(2, n), take(0, n - 2)), 2.0 * h)
    if edge_order == 1:
      first = divide(subtract(take(1, 2), take(0, 1)), h)
      last = divide(subtract(take(n - 1, n), take(n - 2, n - 1)), h)
    else:
      first = divide(
        add(add(multiply(take(0, 1), -1.5), multiply(take(1, 2), 2.0)), multiply(take(2, 3), -0.5)),
        h,
      )
      last = divide(
        add(
          add(multiply(take(n - 3, n - 2), 0.5), multiply(take(n - 2, n - 1), -2.0)),
          multiply(take(n - 1, n), 1.5),
        ),
        h,
      )
    outs.append(concatenate([first, inner, last], ax))
  return outs[0] if len(outs) == 1 else tuple(outs)


@_op
def trapezoid(y, x=None, dx=1.0, axis=-1):
  y = _float(y)
  ax = _one_axis(axis, aval_of(y).ndim)
  n = aval_of(y).shape[ax]
  mid = multiply(add(_slice_axis(y, ax, 1, n), _slice_axis(y, ax, 0, n - 1)), 0.5)
  if x is None:
    return multiply(sum(mid, ax), float(dx))
  x = _float(x)
  if aval_of(x).ndim == 1:
    d = diff(x)
    shape_ = [1] * aval_of(y).ndim
    shape_[ax] = n - 1
    d = reshape(d, shape_)
  else:
    d = diff(x, axis=ax)
  return sum(multiply(mid, d), ax)
